// rpcjob's side of the GPU benchmark (benchmarks/gpu/run.sh prints it beside
// PyTorch's RPC measured in the same run): CUDA identity round trips of 4 MB
// and 400 MB (cuda:0 -> cuda:1 -> cuda:0, or cuda:0 -> cuda:0 in the other process
// on a one-GPU machine), the small CUDA call round trip, the model-split
// experiment (10 forward passes, linear on cuda:0 here, linear on the worker's GPU
// there), and the CUDA RPC recipe's experiment (10 iterations of forward and
// distributed backward, "CPU RPC" and "CUDA RPC" modes). One JSON object on stdout.
// Channels: RPCJOB_GPU_CHANNELS (empty: every viable one, cuda_nvlink first).
// RPCJOB_BENCH_BREAKDOWN=1 prints the recipe's per-iteration phases on stderr;
// RPCJOB_BENCH_ONLY=recipe runs the model split and the recipe alone; =small, =4mb or
// =400mb that round trip alone (with its bound): a phase of its own to trace
// (RPCJOB_TRACE, benchmarks/profile/trace_timeline.py --between call.send).
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "cuda_lane/cuda_lane.h"
#include "gpu_autograd_functions.h"
#include "gpu_pair.h"
#include "rpcjob/assignment/intra_op_threads.h"

using namespace rpcjob;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Round trip times in call order (RPCJOB_BENCH_TRACE=1 prints them to stderr), then sorted.
std::vector<double> roundTrips(runtime::Runtime& rt, const at::Tensor& x, int warmup, int n) {
  std::vector<double> out;
  for (int i = 0; i < warmup + n; ++i) {
    auto t0 = Clock::now();
    // rpcSync leaves the answer's copy to the current stream: wait for it there, as
    // PyTorch's side (torch_rpc_bench.py) does after its rpc_sync.
    at::Tensor y = rt.rpcSync("w1", runtime::kBuiltinEcho, {x}).toTensor();
    c10::cuda::getCurrentCUDAStream(0).synchronize();
    auto t1 = Clock::now();
    if (i >= warmup) out.push_back(seconds(t1 - t0));
  }
  if (std::getenv("RPCJOB_BENCH_TRACE") != nullptr) {
    std::fprintf(stderr, "%zu bytes:", x.nbytes());
    for (double t : out) std::fprintf(stderr, " %.1f", t * 1e6);
    std::fprintf(stderr, " us\n");
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The hardware's bound for the same round trip: cudaMemcpyPeerAsync cuda:0 -> cuda:peer
// -> cuda:0 in this process (peer 0 on a one-GPU machine: two device-to-device
// copies), host waits at the end. Measured last: it enables peer access in this
// process, which the RPC measurements must not have. Each copy is issued on a
// stream of device `firstOn` / `secondOn` (an event orders the second after the
// first when they differ): (0, 0) is the bound the share is of; (peer, 0) pulls
// both ways, as cuda_nvlink's receiver does; (0, peer) pushes both ways. The
// GPU that issues a peer copy drives it, and a pull may not match a push.
std::vector<double> rawRoundTrips(const at::Tensor& x, int peer, int warmup, int n, int firstOn = 0,
                                  int secondOn = 0, int hopsBetween = 0, int hopsAfter = 0) {
  if (peer != 0) {
    for (int from : {0, peer}) {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(from));
      if (cudaDeviceEnablePeerAccess(peer - from, 0) != cudaSuccess) cudaGetLastError();
    }
  }
  at::Tensor there = at::empty_like(x, x.options().device(at::kCUDA, peer));
  at::Tensor back = at::empty_like(x);
  // One stream when both copies go on the same device: two pool streams of it would
  // run the copies at once.
  auto first = c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(firstOn));
  auto second = firstOn == secondOn
                    ? first
                    : c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(secondOn));
  // hopsBetween streams of the first copy's device and hopsAfter of the second's, each
  // waiting on the one before through an event: the stream hand-offs a round trip
  // through the runtime adds (receive -> current -> send stream at the worker,
  // receive -> current at the caller), with nothing else between the copies.
  std::vector<c10::cuda::CUDAStream> between, after;
  for (int i = 0; i < hopsBetween; ++i) {
    between.push_back(c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(firstOn)));
  }
  for (int i = 0; i < hopsAfter; ++i) {
    after.push_back(c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(secondOn)));
  }
  std::vector<at::cuda::CUDAEvent> events(hopsBetween + hopsAfter + 1);
  std::vector<double> out;
  for (int i = 0; i < warmup + n; ++i) {
    auto t0 = Clock::now();
    cudaMemcpyPeerAsync(there.data_ptr(), peer, x.data_ptr(), 0, x.nbytes(), first);
    size_t e = 0;
    c10::cuda::CUDAStream last = first;
    for (auto& s : between) {
      events[e].record(last);
      events[e++].block(s);
      last = s;
    }
    if (last != second) {
      events[e].record(last);
      events[e++].block(second);
    }
    cudaMemcpyPeerAsync(back.data_ptr(), 0, there.data_ptr(), peer, x.nbytes(), second);
    last = second;
    for (auto& s : after) {
      events[e].record(last);
      events[e++].block(s);
      last = s;
    }
    last.synchronize();
    if (i >= warmup) out.push_back(seconds(Clock::now() - t0));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The recipe: `with context() as ctx: y = rm(lm(x)); backward(ctx, [y.sum()])`,
// 10 times, lm a 1000x1000 linear on cuda:0 here, rm one on cuda:1 in the
// worker. "cpu" mode sends the activations through host memory both ways (each
// half returns y.cpu()); "cuda" mode keeps them on the GPUs (device maps). One
// iteration first, outside the timing (the remote half's allocations); then
// `blocks` timed blocks of 10 iterations, their times in order.
std::vector<double> recipe(runtime::Runtime& rt, bool cpuMode, int blocks = 1) {
  namespace dist = runtime::dist_autograd;
  // The worker's GPU: cuda:1, or cuda:0 shared by both processes on one GPU.
  const std::string workerDevice = c10::cuda::device_count() > 1 ? "cuda:1" : "cuda:0";
  rt.rpcSync("w1", "gag.make", {workerDevice, int64_t{1000}, int64_t{1000}, int64_t{2}, cpuMode});
  auto [lw, lb] = gpu::gpuLinearParams(1000, 1000, 1, c10::Device("cuda:0"));
  at::manual_seed(0);
  at::Tensor x = at::randn({1000, 1000}, at::TensorOptions().device(at::kCUDA, 0));
  // RPCJOB_BENCH_BREAKDOWN=1: where each timed iteration's host time goes, on stderr
  // (phases end when the host moves on; GPU work may still be queued).
  const bool breakdown = std::getenv("RPCJOB_BENCH_BREAKDOWN") != nullptr;
  const bool hostWait = std::getenv("RPCJOB_BENCH_HOST_WAIT") != nullptr;
  constexpr int kPhases = 6;
  static const char* kNames[kPhases] = {"context", "local forward", "rpcSync forward",
                                        "y.sum()", "dist backward", "context release"};
  std::vector<std::array<double, kPhases>> phases;
  auto iteration = [&, lw = lw, lb = lb] {
    std::array<Clock::time_point, kPhases + 1> t;
    t[0] = Clock::now();
    {
      dist::Context ctx(rt);
      t[1] = Clock::now();
      at::Tensor h = at::linear(x, lw, lb);
      at::Tensor sent = cpuMode ? h.cpu() : h;
      t[2] = Clock::now();
      // rpcSync's CUDA result is waited on by the current stream (as PyTorch's
      // rpc_sync); RPCJOB_BENCH_HOST_WAIT=1: by the host, for comparison.
      at::Tensor y = hostWait ? rt.rpcAsync("w1", "gag.forward", {sent}).value().toTensor()
                              : rt.rpcSync("w1", "gag.forward", {sent}).toTensor();
      t[3] = Clock::now();
      at::Tensor loss = y.sum();
      t[4] = Clock::now();
      dist::backward(rt, ctx.id(), {loss});
      t[5] = Clock::now();
    }
    t[6] = Clock::now();
    std::array<double, kPhases> d;
    for (int k = 0; k < kPhases; ++k) d[k] = seconds(t[k + 1] - t[k]);
    phases.push_back(d);
  };
  iteration();
  c10::cuda::getCurrentCUDAStream(0).synchronize();
  std::vector<double> totals;
  for (int b = 0; b < blocks; ++b) {
    phases.clear();
    auto t0 = Clock::now();
    for (int i = 0; i < 10; ++i) iteration();
    c10::cuda::getCurrentCUDAStream(0).synchronize();
    totals.push_back(seconds(Clock::now() - t0));
  }
  const double total = totals.back();
  if (breakdown) {
    std::fprintf(stderr, "recipe %s RPC, 10 iterations in %.4f s; per iteration (ms):\n",
                 cpuMode ? "CPU" : "CUDA", total);
    for (int k = 0; k < kPhases; ++k) {
      std::fprintf(stderr, "  %-16s", kNames[k]);
      for (const auto& d : phases) std::fprintf(stderr, " %7.3f", d[k] * 1e3);
      std::fprintf(stderr, "\n");
    }
  }
  return totals;
}

// "0.0081, 0.0090" (seconds, as the JSON's other times).
std::string list(const std::vector<double>& v) {
  std::string out;
  for (double x : v) {
    char item[32];
    std::snprintf(item, sizeof(item), "%s%.4f", out.empty() ? "" : ", ", x);
    out += item;
  }
  return out;
}

double pct(const std::vector<double>& v, double p) {
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace

int main(int, char** argv) {
  // Both processes (this one and the worker it starts) run with the intra-op
  // environment `rpcjob run` gives each of two workers on this machine
  // (intra_op_threads.h), unless OMP_NUM_THREADS says otherwise: the recipe's CPU
  // mode depends on it. libgomp reads it when it loads, before main: set, start again.
  const auto set = [](const std::string& name) { return std::getenv(name.c_str()) != nullptr; };
  const auto env = intraOpEnvironment(
      intraOpThreads(static_cast<int>(std::thread::hardware_concurrency()), 2), set);
  if (!env.empty()) {
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    execv("/proc/self/exe", argv);
    std::perror("rpcjob-gpu-bench: execv");
    return 1;
  }
  gpu::runWorkerIfAsked(gpu::registerGpuAutogradFunctions);
  // RPCJOB_BENCH_ONLY: one part alone (the other figures print as 0).
  const char* onlyEnv = std::getenv("RPCJOB_BENCH_ONLY");
  const std::string only = onlyEnv != nullptr ? onlyEnv : "";
  if (!only.empty() && only != "recipe" && only != "small" && only != "4mb" && only != "400mb") {
    std::fprintf(stderr,
                 "rpcjob-gpu-bench: RPCJOB_BENCH_ONLY=%s: not recipe, small, 4mb or 400mb\n",
                 only.c_str());
    return 2;
  }
  const auto want = [&](const char* part) { return only.empty() || only == part; };
  const char* ch = std::getenv("RPCJOB_GPU_CHANNELS");
  // The worker's GPU: cuda:1 where there is one, else both processes share cuda:0
  // (RPCJOB_GPU_PEER_DEVICE=0 asks for the shared GPU on a larger machine too).
  const char* peerEnv = std::getenv("RPCJOB_GPU_PEER_DEVICE");
  const int peer = peerEnv != nullptr && *peerEnv != '\0' ? std::atoi(peerEnv)
                                                          : (c10::cuda::device_count() > 1 ? 1 : 0);
  const std::string remote = "cuda:" + std::to_string(peer);
  gpu::Pair pair({{"cuda:0", remote}}, "", ch ? ch : "", gpu::registerGpuAutogradFunctions);
  pair.start();
  auto& rt = pair.rt();
  auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0);
  at::Tensor small = at::ones({1}, opts);
  // 4 MB and 400 MB in SI units (4e6 and 400e6 bytes), as the GB/s figures are.
  at::Tensor mb4 = at::ones({1000 * 1000}, opts);
  at::Tensor mb400 = at::ones({100 * 1000 * 1000}, opts);
  c10::cuda::device_synchronize();  // set-up only, outside every measurement
  auto s = want("small") ? roundTrips(rt, small, 200, 3000) : std::vector<double>{0};
  auto r4 = want("4mb") ? roundTrips(rt, mb4, 20, 200) : std::vector<double>{0};
  // RPCJOB_BENCH_400MB_ROUNDS=N: N round trips of 400 MB instead of 40, a steady phase
  // long enough to profile (benchmarks/profile/gpu-bench-threads.sh).
  const char* rounds400 = std::getenv("RPCJOB_BENCH_400MB_ROUNDS");
  const int n400 = rounds400 != nullptr && std::atoi(rounds400) > 0 ? std::atoi(rounds400) : 40;
  auto r400 = want("400mb") ? roundTrips(rt, mb400, 5, n400) : std::vector<double>{1};
  double split = 0, recipeCpu = 0, recipeCuda = 0;
  std::vector<double> recipeCudaBlocks;
  if (want("recipe")) {
    // Model split: forward only (the recipe below adds the backward pass).
    at::manual_seed(0);
    at::Tensor w0 = at::randn({1000, 1000}, opts) * 0.03;
    at::Tensor b0 = at::zeros({1000}, opts);
    at::Tensor x = at::randn({1000, 1000}, opts);
    rt.rpcSync("w1", "linear1", {at::linear(x, w0, b0)});  // warm-up: creates the remote shard
    c10::cuda::getCurrentCUDAStream(0).synchronize();
    auto t0 = Clock::now();
    at::Tensor y;
    for (int i = 0; i < 10; ++i)
      y = rt.rpcSync("w1", "linear1", {at::linear(x, w0, b0)}).toTensor();
    c10::cuda::getCurrentCUDAStream(0).synchronize();
    split = seconds(Clock::now() - t0);
    recipeCpu = recipe(rt, /*cpuMode=*/true).front();
    // CUDA mode, blocks of 10 iterations in a row (RPCJOB_BENCH_RECIPE_BLOCKS, default 7;
    // torch_rpc_bench.py times as many): one block varies by +-30 % between runs on the
    // GPU hosts, as the floor's blocks do (recipe_floor.cc prints their median too).
    const char* blocksEnv = std::getenv("RPCJOB_BENCH_RECIPE_BLOCKS");
    const int blocks = std::max(1, blocksEnv != nullptr ? std::atoi(blocksEnv) : 7);
    recipeCudaBlocks = recipe(rt, /*cpuMode=*/false, blocks);
    std::vector<double> sorted = recipeCudaBlocks;  // the JSON keeps them in order
    std::sort(sorted.begin(), sorted.end());
    recipeCuda = pct(sorted, 0.5);
    // RPCJOB_BENCH_RECIPE_REPEAT=N: N more CUDA recipes, each total on stderr: a steady
    // phase long enough to profile (benchmarks/profile/recipe-threads.sh).
    if (const char* repeat = std::getenv("RPCJOB_BENCH_RECIPE_REPEAT")) {
      for (int i = 0, n = std::atoi(repeat); i < n; ++i) {
        std::fprintf(stderr, "recipe CUDA RPC, repeat %d: %.4f s\n", i, recipe(rt, false).front());
      }
    }
  }
  auto raw4 = want("4mb") ? rawRoundTrips(mb4, peer, 20, 200) : std::vector<double>{1};
  auto raw400 = want("400mb") ? rawRoundTrips(mb400, peer, 3, 20) : std::vector<double>{1};
  // Two GPUs: the same copies pulled both ways, and pushed both ways (0 on one GPU).
  const bool ways = want("400mb") && peer != 0;
  auto pull400 = ways ? rawRoundTrips(mb400, peer, 3, 20, peer, 0) : std::vector<double>{0};
  auto push400 = ways ? rawRoundTrips(mb400, peer, 3, 20, 0, peer) : std::vector<double>{0};
  // Pulled both ways through as many stream hand-offs as a round trip through us.
  auto hops400 = ways ? rawRoundTrips(mb400, peer, 3, 20, peer, 0, 2, 1) : std::vector<double>{0};
  // The pair's TensorPipe channel; requests whose CUDA tensors went as handles
  const std::string tensorpipeChannel = pair.channelFor("cuda:0", remote);
  // on the lane (cuda_lane/) name it first; lane_pushed: of their tensors,
  // those copied into the server's landing offers by this process.
  const runtime::cuda_lane::Counters lane = runtime::cuda_lane::counters();
  const std::string channel =
      lane.framesLent > 0 ? "cuda_lane, replies " + tensorpipeChannel : tensorpipeChannel;
  std::printf(
      "{\"impl\": \"rpcjob\", \"devices\": \"cuda:0->%s\", \"channel\": \"%s\", \"small_p50_us\": "
      "%.1f, \"small_p99_us\": %.1f, "
      "\"rt4mb_ms\": %.4f, \"rt400mb_ms\": %.3f, \"rt400mb_gbs\": %.1f, \"rt400mb_p10_p90_ms\": "
      "[%.3f, %.3f], \"raw_rt4mb_ms\": %.4f, \"raw_rt400mb_ms\": %.3f, \"raw_rt400mb_gbs\": %.1f, "
      "\"raw_pull_rt400mb_ms\": %.3f, \"raw_push_rt400mb_ms\": %.3f, "
      "\"raw_pull_hops_rt400mb_ms\": %.3f, \"model_split_s\": %.4f, "
      "\"recipe_cpu_rpc_s\": %.4f, \"recipe_cuda_rpc_s\": %.4f, "
      "\"recipe_cuda_rpc_blocks_s\": [%s], \"intra_op_threads\": %d, \"lane_frames\": %llu, "
      "\"lane_pushed\": %llu}\n",
      remote.c_str(), channel.c_str(), pct(s, 0.5) * 1e6, pct(s, 0.99) * 1e6, pct(r4, 0.5) * 1e3,
      pct(r400, 0.5) * 1e3, 2 * 400e6 / 1e9 / pct(r400, 0.5), pct(r400, 0.1) * 1e3,
      pct(r400, 0.9) * 1e3, pct(raw4, 0.5) * 1e3, pct(raw400, 0.5) * 1e3,
      2 * 400e6 / 1e9 / pct(raw400, 0.5), pct(pull400, 0.5) * 1e3, pct(push400, 0.5) * 1e3,
      pct(hops400, 0.5) * 1e3, split, recipeCpu, recipeCuda, list(recipeCudaBlocks).c_str(),
      at::get_num_threads(), static_cast<unsigned long long>(lane.framesLent),
      static_cast<unsigned long long>(lane.tensorsPushed));
  std::fflush(stdout);
  return 0;
}
