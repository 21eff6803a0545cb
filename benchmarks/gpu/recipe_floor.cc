// rpcjob-recipe-floor: the least time the CUDA RPC recipe's 10 iterations can
// take on this machine with two processes, whatever the RPC runtime does: the
// recipe's own GPU work (issue 15: `y = rm(lm(x)); backward([y.sum()])`, two
// 1000x1000 linears) with no RPC, no TensorPipe, no distributed autograd, and
// the ideal hand-off between the halves (a spin on shared memory).
//
// Why: rpcjob-gpu-bench prints the recipe's time, but on a one-GPU machine both
// processes share the GPU and each pass from one CUDA context to the other costs
// ~140 us (rpcjob-same-gpu-floor). An iteration passes four times (the forward
// there and back, its gradient there and back), so a large part of the time is
// the machine's, not ours; this says how large, in the same run.
//
// Each iteration, as the two workers of the recipe do it (a tensor moves by its
// receiver copying it from the sender's memory, as cuda_nvlink does):
//   A  h = linear(x, lw, lb), h into A's out buffer                   -> B
//   B  h' = copy of it (requires grad), y = linear(h', rw, rb), y out  -> A
//   A  y' = copy (requires grad), y'.sum().backward(), y'.grad out     -> B
//   B  y.backward(copy of that), h'.grad out                           -> A
//   A  h.backward(copy of that)
// A party's turn ends when its GPU work has completed (an event, polled), then
// the other's begins.
//
// Modes, each the median (and min) of --blocks blocks of 10 iterations after a
// warm-up:
//   two_processes   the halves in two processes (each its own CUDA context,
//                   forked before CUDA is touched), on cuda:0 and the peer device
//   one_process     both halves in this process, one context, the same waits
//   one_process_gpu both halves in this process, no waits: the GPU work alone
//
//   rpcjob-recipe-floor [--blocks N] [--peer DEVICE]
// prints one JSON line. The peer device is RPCJOB_GPU_PEER_DEVICE, else cuda:1
// where there is one, else cuda:0 (both halves share it, as rpcjob-gpu-bench's).
//
// Exit codes: 0 success, 1 a CUDA call or a child failed, 2 usage.

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <torch/csrc/autograd/autograd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "../floor/forked_parties.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kDim = 1000;
constexpr size_t kBytes = kDim * kDim * sizeof(float);
constexpr int kWarmup = 5;
constexpr int kMaxBlocks = 1000;

// In memory both processes see (MAP_SHARED before the fork).
struct Shared {
  std::atomic<uint64_t> turn{0};  // even: A acts, odd: B
  std::atomic<int> exported{0};
  std::atomic<int> failed{0};
  cudaIpcMemHandle_t out[2];
  double blockSeconds[kMaxBlocks];
};

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// One half of the recipe: its linear, its out buffer (what the other copies
// from) and what it keeps between its turns.
struct Half {
  c10::Device device;
  at::Tensor w, b;      // the linear's parameters (require grad)
  void* out = nullptr;  // kBytes, cudaMalloc'd: IPC-exportable as it is
  at::Tensor keep;      // A: h; B: y
  at::Tensor received;  // B: h' (its grad goes back)
  cudaEvent_t done = nullptr;

  explicit Half(c10::Device d) : device(d) {
    c10::cuda::CUDAGuard guard(device);
    auto opts = at::TensorOptions().device(device);
    w = (at::randn({kDim, kDim}, opts) * 0.03).requires_grad_(true);
    b = at::zeros({kDim}, opts).requires_grad_(true);
    check(cudaMalloc(&out, kBytes), "cudaMalloc");
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  }
  at::Tensor outTensor() const {
    return at::from_blob(out, {kDim, kDim}, at::TensorOptions().device(device));
  }
  // A copy of the other half's out buffer (`from`, this process's mapping of
  // it), on this half's device and current stream.
  at::Tensor receive(const void* from) const {
    at::Tensor t = at::empty({kDim, kDim}, at::TensorOptions().device(device));
    check(cudaMemcpyAsync(t.data_ptr(), from, kBytes, cudaMemcpyDefault,
                          at::cuda::getCurrentCUDAStream(device.index())),
          "cudaMemcpyAsync");
    return t;
  }
  void wait() const {
    // The current stream may be the legacy default stream, whose handle (0) means
    // the *current* device's: without the guard, B's wait in the one-process mode
    // recorded its cuda:1 event on cuda:0's stream ("invalid resource handle",
    // seen on 2 and 4 x H200).
    c10::cuda::CUDAGuard guard(device);
    auto stream = at::cuda::getCurrentCUDAStream(device.index());
    check(cudaEventRecord(done, stream), "cudaEventRecord");
    cudaError_t e;
    while ((e = cudaEventQuery(done)) == cudaErrorNotReady) {
    }
    check(e, "cudaEventQuery");
  }
  void clearGrads() {
    w.mutable_grad() = at::Tensor();
    b.mutable_grad() = at::Tensor();
  }
};

// The recipe's steps. `peerOut` is the other half's out buffer as this process
// maps it. Step 0 of iteration i+1 and step 4 of iteration i are one turn of A.
void stepA0(Half& a, const at::Tensor& x) {
  c10::cuda::CUDAGuard guard(a.device);
  a.keep = at::linear(x, a.w, a.b);
  a.outTensor().copy_(a.keep.detach());
}
void stepB1(Half& b, const void* peerOut) {
  c10::cuda::CUDAGuard guard(b.device);
  b.received = b.receive(peerOut).requires_grad_(true);
  b.keep = at::linear(b.received, b.w, b.b);
  b.outTensor().copy_(b.keep.detach());
}
void stepA2(Half& a, const void* peerOut) {
  c10::cuda::CUDAGuard guard(a.device);
  at::Tensor y = a.receive(peerOut).requires_grad_(true);
  torch::autograd::backward({y.sum()});
  a.outTensor().copy_(y.grad());
}
void stepB3(Half& b, const void* peerOut) {
  c10::cuda::CUDAGuard guard(b.device);
  torch::autograd::backward({b.keep}, {b.receive(peerOut)});
  b.outTensor().copy_(b.received.grad());
  b.clearGrads();
  b.keep = at::Tensor();
  b.received = at::Tensor();
}
void stepA4(Half& a, const void* peerOut) {
  c10::cuda::CUDAGuard guard(a.device);
  torch::autograd::backward({a.keep}, {a.receive(peerOut)});
  a.clearGrads();
  a.keep = at::Tensor();
}

at::Tensor input(c10::Device d) {
  at::manual_seed(0);
  return at::randn({kDim, kDim}, at::TensorOptions().device(d));
}

// Party `me` (0: A, 1: B) exports its half's out buffer, waits for the
// other's, and maps it: this process's address of the other's out buffer.
void* exchangeOut(Shared* s, int me, const Half& half) {
  check(cudaIpcGetMemHandle(&s->out[me], half.out), "cudaIpcGetMemHandle");
  s->exported.fetch_add(1);
  while (s->exported.load() < 2) {
    if (s->failed.load()) throw std::runtime_error("the other party failed");
  }
  void* theirs = nullptr;
  check(cudaIpcOpenMemHandle(&theirs, s->out[1 - me], cudaIpcMemLazyEnablePeerAccess),
        "cudaIpcOpenMemHandle");
  return theirs;
}

// The turn passes A, B, A, B...: `turn` is the caller's own, its next one once
// it has given this one away.
void giveTurn(Shared* s, uint64_t& turn) {
  s->turn.store(++turn, std::memory_order_release);
  ++turn;
}
void awaitTurn(const Shared* s, uint64_t turn) {
  while (s->turn.load(std::memory_order_acquire) != turn) {
    if (s->failed.load(std::memory_order_relaxed)) throw std::runtime_error("the other failed");
  }
}

// A's side of the two-process mode: its turns, timing each block.
void partyA(Shared* s, c10::Device dev, int blocks) {
  at::manual_seed(1);
  Half a(dev);
  at::Tensor x = input(dev);
  void* theirs = exchangeOut(s, 0, a);
  uint64_t turn = 0;
  auto handOver = [&] {
    giveTurn(s, turn);
    awaitTurn(s, turn);
  };
  auto iteration = [&] {
    stepA0(a, x);
    a.wait();
    handOver();
    stepA2(a, theirs);
    a.wait();
    handOver();
    stepA4(a, theirs);
  };
  for (int i = 0; i < kWarmup; ++i) iteration();
  a.wait();
  for (int k = 0; k < blocks; ++k) {
    auto t0 = Clock::now();
    for (int i = 0; i < 10; ++i) iteration();
    a.wait();
    s->blockSeconds[k] = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  cudaIpcCloseMemHandle(theirs);
}

void partyB(Shared* s, c10::Device dev, int iterations) {
  at::manual_seed(2);
  Half b(dev);
  void* theirs = exchangeOut(s, 1, b);
  uint64_t turn = 1;
  for (int i = 0; i < iterations; ++i) {
    awaitTurn(s, turn);
    stepB1(b, theirs);
    b.wait();
    giveTurn(s, turn);
    awaitTurn(s, turn);
    stepB3(b, theirs);
    b.wait();
    giveTurn(s, turn);  // A's next turn starts its next iteration
  }
  cudaIpcCloseMemHandle(theirs);
}

// The two halves in two processes; the blocks' times, or empty when one failed.
std::vector<double> twoProcesses(Shared* s, c10::Device devA, c10::Device devB, int blocks) {
  s->turn.store(0);
  s->exported.store(0);
  s->failed.store(0);
  pid_t children[2];
  for (int me = 0; me < 2; ++me) {
    children[me] = fork();
    if (children[me] != 0) continue;
    alarm(120);  // a party that never gets its turn must not hang the run
    try {
      if (me == 0) {
        partyA(s, devA, blocks);
      } else {
        partyB(s, devB, kWarmup + 10 * blocks);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rpcjob-recipe-floor: party %c: %s\n", me == 0 ? 'A' : 'B', e.what());
      s->failed.store(1);
      _exit(1);
    }
    _exit(0);
  }
  if (!rpcjob::floor::reap(children)) return {};
  return std::vector<double>(s->blockSeconds, s->blockSeconds + blocks);
}

// Both halves here, in order; `waits`: each turn waits for its GPU work as the
// two-process mode must.
std::vector<double> oneProcess(c10::Device devA, c10::Device devB, int blocks, bool waits) {
  at::manual_seed(1);
  Half a(devA);
  at::manual_seed(2);
  Half b(devB);
  at::Tensor x = input(devA);
  auto turnEnds = [&](const Half& h) {
    if (waits) h.wait();
  };
  auto iteration = [&] {
    stepA0(a, x);
    turnEnds(a);
    stepB1(b, a.out);
    turnEnds(b);
    stepA2(a, b.out);
    turnEnds(a);
    stepB3(b, a.out);
    turnEnds(b);
    stepA4(a, b.out);
  };
  for (int i = 0; i < kWarmup; ++i) iteration();
  a.wait();
  b.wait();
  std::vector<double> out;
  for (int k = 0; k < blocks; ++k) {
    auto t0 = Clock::now();
    for (int i = 0; i < 10; ++i) iteration();
    a.wait();
    b.wait();
    out.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  cudaFree(a.out);
  cudaFree(b.out);
  return out;
}

struct Figures {
  double median = 0, min = 0;
};
Figures figures(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? Figures{} : Figures{v[v.size() / 2], v.front()};
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 30;
  int peer = -1;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--blocks" && i + 1 < argc) {
      blocks = std::atoi(argv[++i]);
    } else if (arg == "--peer" && i + 1 < argc) {
      peer = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: rpcjob-recipe-floor [--blocks N] [--peer DEVICE]\n");
      return 2;
    }
  }
  if (blocks < 1 || blocks > kMaxBlocks) {
    std::fprintf(stderr, "rpcjob-recipe-floor: --blocks must be in [1, %d]\n", kMaxBlocks);
    return 2;
  }
  // The device count comes from a child: CUDA must stay untouched here until
  // the two-process mode has forked.
  if (peer < 0) {
    if (const char* env = std::getenv("RPCJOB_GPU_PEER_DEVICE"); env && *env) {
      peer = std::atoi(env);
    } else {
      int fds[2];
      if (pipe(fds) != 0) return 1;
      if (fork() == 0) {
        int n = 0;
        cudaGetDeviceCount(&n);
        (void)!write(fds[1], &n, sizeof n);
        _exit(0);
      }
      int n = 0;
      (void)!read(fds[0], &n, sizeof n);
      wait(nullptr);
      peer = n > 1 ? 1 : 0;
    }
  }
  auto* s = rpcjob::floor::newShared<Shared>("rpcjob-recipe-floor");
  if (s == nullptr) return 1;
  const c10::Device devA(c10::kCUDA, 0), devB(c10::kCUDA, static_cast<c10::DeviceIndex>(peer));
  const Figures two = figures(twoProcesses(s, devA, devB, blocks));
  if (two.median == 0) {
    std::fprintf(stderr, "rpcjob-recipe-floor: the two-process mode failed\n");
    return 1;
  }
  Figures one, gpu;
  try {
    one = figures(oneProcess(devA, devB, blocks, /*waits=*/true));
    gpu = figures(oneProcess(devA, devB, blocks, /*waits=*/false));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rpcjob-recipe-floor: %s\n", e.what());
    return 1;
  }
  std::printf(
      "{\"impl\": \"recipe floor\", \"devices\": \"cuda:0->cuda:%d\", \"blocks\": %d, "
      "\"two_processes_s\": %.4f, \"two_processes_min_s\": %.4f, \"one_process_s\": %.4f, "
      "\"one_process_min_s\": %.4f, \"one_process_gpu_s\": %.4f, \"one_process_gpu_min_s\": "
      "%.4f}\n",
      peer, blocks, two.median, two.min, one.median, one.min, gpu.median, gpu.min);
  return 0;
}
