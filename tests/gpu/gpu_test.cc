// GPU tests (CUDA build, run on the GPU machine by tests/gpu/run-all.sh): device
// map validation, exact values across devices, stream ordering after a
// non-blocking wait, `then` on pool streams, every viable CUDA channel (each
// forced through the allowed-channel set, rpcjob's cuda_nvlink included), and
// /metrics served from a process that links the CUDA libtorch.
//
// They run on whatever the machine has. The two processes of a pair use cuda:0
// and cuda:1 where there are two GPUs, and share cuda:0 where there is one; the
// channel tests cover every ordered pair of GPUs that can reach each other (the
// same GPU from two processes included). What truly needs a second GPU is skipped
// with the reason. Each test prints the devices it used on a "[ devices  ]" line,
// which run-all.sh collects.
#include <arpa/inet.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "cuda/cuda_serialization.h"
#include "cuda/receive_spares.h"
#include "cuda_lane/cuda_lane.h"
#include "gpu_pair.h"
#include "rpcjob/metrics/http_server.h"
#include "rpcjob/metrics/metrics.h"

using namespace rpcjob;
using runtime::RpcError;

namespace {

std::string startError(DeviceMap map) {
  gpu::Pair pair(std::move(map), "", "");
  try {
    pair.start();
  } catch (const RpcError& e) {
    return e.what();
  }
  return "";
}

at::Tensor onDevice(int64_t n, int device, float start = 0) {
  return at::arange(start, start + n,
                    at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device));
}

bool sameValues(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::equal(a.cpu(), b.cpu());
}

// The worker's GPU: cuda:1, or cuda:0 shared on a one-GPU machine.
int workerGpu() {
  return gpu::workerGpu();
}

void devicesUsed(const std::string& what) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << "[ devices  ] " << test->test_suite_name() << "." << test->name() << ": " << what
            << " (" << gpu::gpuCount() << " GPU(s) here)" << std::endl;
}

std::string pairDevices() {
  return "driver cuda:0 <-> w1 " + gpu::cudaName(workerGpu()) +
         (workerGpu() == 0 ? " (one GPU shared by two processes)" : "");
}

// A device index no GPU here has.
std::string missingDevice() {
  return gpu::cudaName(gpu::gpuCount());
}

// Joins a thread however the scope is left: a std::thread destroyed while
// joinable ends the process ("terminate called without an active exception").
class JoinOnExit {
 public:
  explicit JoinOnExit(std::thread& t) : t_(t) {}
  ~JoinOnExit() {
    if (t_.joinable()) t_.join();
  }

 private:
  std::thread& t_;
};

}  // namespace

TEST(DeviceMaps, LocalDeviceMustExist) {
  devicesUsed("map " + missingDevice() + " -> cuda:0");
  std::string e = startError({{missingDevice(), "cuda:0"}});
  EXPECT_NE(e.find(missingDevice()), std::string::npos) << e;
  EXPECT_NE(e.find("w1"), std::string::npos) << e;
}

TEST(DeviceMaps, MustBeOneToOne) {
  devicesUsed("map cpu and cuda:0 -> " + gpu::cudaName(workerGpu()));
  std::string e =
      startError({{"cpu", gpu::cudaName(workerGpu())}, {"cuda:0", gpu::cudaName(workerGpu())}});
  EXPECT_NE(e.find("one-to-one"), std::string::npos) << e;
}

TEST(DeviceMaps, BadDeviceName) {
  std::string e = startError({{"gpu0", "cuda:1"}});
  EXPECT_NE(e.find("gpu0"), std::string::npos) << e;
}

TEST(DeviceMaps, RemoteDeviceMustExist) {
  devicesUsed("map cuda:0 -> " + missingDevice() + " of w1");
  std::string e = startError({{"cuda:0", missingDevice()}});
  EXPECT_NE(e.find(missingDevice()), std::string::npos) << e;
  EXPECT_NE(e.find("w1"), std::string::npos) << e;
}

TEST(DeviceMaps, UnmappedTensorIsAClearError) {
  const int last = gpu::gpuCount() - 1;
  devicesUsed("no map; a tensor on " + gpu::cudaName(last));
  gpu::Pair pair({}, "", "");
  pair.start();
  try {
    pair.rt().rpcSync("w1", "device_of", {onDevice(16, last)});
    FAIL() << "no error";
  } catch (const RpcError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(gpu::cudaName(last)), std::string::npos) << m;
    EXPECT_NE(m.find("w1"), std::string::npos) << m;
  }
}

TEST(DeviceMaps, ResponseUsesInverseMap) {
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", gpu::cudaName(workerGpu())}}, "", "");
  pair.start();
  auto& rt = pair.rt();
  EXPECT_EQ(rt.rpcSync("w1", "device_of", {onDevice(16, 0)}).toStringRef(),
            gpu::cudaName(workerGpu()));
  // w1 answers with a tensor on its GPU: the inverse map brings it to cuda:0 here.
  at::Tensor t = rt.rpcSync("w1", "make_on", {gpu::cudaName(workerGpu()), 2.5}).toTensor();
  EXPECT_EQ(t.device(), c10::Device(at::kCUDA, 0));
  EXPECT_TRUE(at::equal(t.cpu(), at::full({1024}, 2.5)));
}

TEST(DeviceMaps, CpuToGpuAndBack) {
  devicesUsed("map cpu -> cuda:0 of w1");
  gpu::Pair pair({{"cpu", "cuda:0"}}, "", "");
  pair.start();
  auto& rt = pair.rt();
  EXPECT_EQ(rt.rpcSync("w1", "device_of", {at::ones({4})}).toStringRef(), "cuda:0");
  // A CPU tensor sent to cuda:0 there comes back to the host.
  at::Tensor h = at::arange(0, 100, at::kFloat);
  at::Tensor back = rt.rpcSync("w1", runtime::kBuiltinEcho, {h}).toTensor();
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_TRUE(at::equal(back, h));
}

TEST(DeviceMaps, SecondLocalGpuWithoutMapIsRejected) {
  if (gpu::gpuCount() < 2) {
    GTEST_SKIP() << "needs 2 GPUs: a tensor on a second local GPU that the map leaves out";
  }
  devicesUsed("map cuda:0 -> cuda:1; a tensor on cuda:1");
  gpu::Pair pair({{"cuda:0", "cuda:1"}}, "", "");
  pair.start();
  EXPECT_THROW(pair.rt().rpcSync("w1", "device_of", {onDevice(4, 1)}), RpcError);
}

TEST(Values, ExactAcrossDevices) {
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", gpu::cudaName(workerGpu())}}, "", "");
  pair.start();
  for (int64_t n : {1, 1000, 1 << 20, 25 << 20}) {
    at::Tensor x = onDevice(n, 0, 3);
    at::Tensor y = pair.rt().rpcSync("w1", "add_one", {x}).toTensor();
    EXPECT_EQ(y.device(), c10::Device(at::kCUDA, 0));
    EXPECT_TRUE(sameValues(y, x + 1)) << n;
    at::Tensor z = pair.rt().rpcSync("w1", runtime::kBuiltinEcho, {x}).toTensor();
    EXPECT_TRUE(sameValues(z, x)) << n;
  }
  // A view into a larger allocation (non-zero offset) and a non-contiguous one.
  at::Tensor big = onDevice(1 << 22, 0);
  at::Tensor view = big.narrow(0, 12345, 1 << 20);
  EXPECT_TRUE(sameValues(pair.rt().rpcSync("w1", runtime::kBuiltinEcho, {view}).toTensor(), view));
  at::Tensor strided = big.view({1024, 4096}).t();
  EXPECT_TRUE(
      sameValues(pair.rt().rpcSync("w1", runtime::kBuiltinEcho, {strided}).toTensor(), strided));
}

// A large CUDA tensor received again at the same size lands in a buffer held
// ahead for it (receive_spares.h): here the caller's replies, values exact.
TEST(Values, RepeatedLargeReceivesTakeBuffersHeldAhead) {
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", gpu::cudaName(workerGpu())}}, "", "");
  pair.start();
  auto& spares = runtime::cuda::receiveSpares();
  constexpr int kRounds = 6;
  constexpr int64_t kCount = 8 << 20;  // floats: 32 MB
  constexpr size_t kBytes = kCount * sizeof(float);
  if (spares.budget() < kBytes) {
    GTEST_SKIP() << "RPCJOB_RECEIVE_SPARE_BYTES holds less than one 32 MB buffer";
  }
  // The counts are the process's: a buffer of this size held for an earlier
  // test (or repeat) would meet the first reply.
  while (spares.take(0, kBytes)) {
  }
  const auto before = spares.stats();
  at::Tensor y;
  for (int i = 0; i < kRounds; ++i) {
    at::Tensor x = onDevice(kCount, 0, static_cast<float>(i));
    y = pair.rt().rpcSync("w1", runtime::kBuiltinEcho, {x}).toTensor();
    EXPECT_EQ(y.device(), c10::Device(at::kCUDA, 0));
    EXPECT_TRUE(sameValues(y, x)) << i;
    // The reply completes before its message is done with: wait for the buffer
    // its size asked for, so that every later reply finds one.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (spares.held(0, kBytes) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  const auto after = spares.stats();
  EXPECT_EQ(after.taken - before.taken, static_cast<uint64_t>(kRounds - 1));
  EXPECT_EQ(after.missed - before.missed, 1u) << "the first reply alone";
  // As at::empty's: its storage grows (resize_, out= ops).
  EXPECT_NO_THROW(y.resize_({2 * kCount}));
  EXPECT_EQ(y.numel(), 2 * kCount);
}

// Host tensors received by a process that already uses a GPU land in page-locked
// memory (moving them to the GPU is one DMA), both ways, with exact values.
TEST(Values, HostTensorsArrivePinnedWhereAGpuIsInUse) {
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", gpu::cudaName(workerGpu())}}, "", "");
  pair.start();
  auto& rt = pair.rt();
  // Both processes use their GPU from here on (a CUDA primary context exists).
  rt.rpcSync("w1", "make_on", {gpu::cudaName(workerGpu()), 1.0});
  at::ones({1}, at::TensorOptions().device(at::kCUDA, 0));
  at::Tensor h = at::arange(0, 1 << 20, at::kFloat);
  EXPECT_TRUE(rt.rpcSync("w1", "is_pinned", {h}).toBool());
  at::Tensor back = rt.rpcSync("w1", runtime::kBuiltinEcho, {h}).toTensor();
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_TRUE(back.is_pinned());
  EXPECT_TRUE(at::equal(back, h));
  EXPECT_TRUE(at::equal(back.to(at::kCUDA).cpu(), h));
}

TEST(Streams, KernelAfterNonBlockingWaitSeesTheData) {
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", gpu::cudaName(workerGpu())}}, "", "");
  pair.start();
  for (int i = 0; i < 5; ++i) {
    at::Tensor x =
        at::full({64 << 20}, static_cast<float>(i), at::TensorOptions().device(at::kCUDA, 0));
    auto fut = pair.rt().rpcAsync("w1", "add_one", {x});
    at::Tensor y = fut.valueOnStreams().toTensor();  // no host wait on the GPU
    at::Tensor z = y * 2;                            // enqueued on the current stream
    EXPECT_TRUE(at::equal(z.cpu(), at::full({64 << 20}, 2.0f * (i + 1)))) << i;
  }
}

TEST(Streams, ThenRunsOnPoolStreamsThatWaitOnTheEvents) {
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", gpu::cudaName(workerGpu())}}, "", "");
  pair.start();
  at::Tensor x = at::full({32 << 20}, 5.0f, at::TensorOptions().device(at::kCUDA, 0));
  auto fut = pair.rt().rpcAsync("w1", "add_one", {x});
  auto streamId = std::make_shared<int64_t>(-1);
  auto next = fut.then([streamId](const runtime::Future& f) {
    *streamId = c10::cuda::getCurrentCUDAStream(0).id();
    return c10::IValue(f.valueOnStreams().toTensor() * 3);
  });
  at::Tensor r = next.value().toTensor();
  EXPECT_FALSE(fut.deviceEvents().empty());
  EXPECT_FALSE(next.deviceEvents().empty());
  EXPECT_NE(*streamId, c10::cuda::getDefaultCUDAStream(0).id());
  EXPECT_TRUE(at::equal(r.cpu(), at::full({32 << 20}, 18.0f)));
}

class Channels : public ::testing::TestWithParam<std::string> {};

// Every ordered pair of GPUs (i here, j in w1; i == j is one GPU shared by two
// processes) over the forced channel: n pairs of processes, the k-th mapping
// cuda:i -> cuda:(i+k)%n for every i (device maps are one-to-one), so n*n device
// pairs in all. cuda_nvlink and cuda_ipc need peer access between different GPUs:
// pairs without it are left out of the map and reported.
TEST_P(Channels, ForcedChannelMovesExactValuesBetweenEveryPair) {
  const std::string channel = GetParam();
  const int n = gpu::gpuCount();
  const bool needsPeerAccess = channel != "cuda_basic";
  std::vector<std::string> covered;
  std::vector<std::string> unreachable;
  for (int k = 0; k < n; ++k) {
    DeviceMap map;
    for (int i = 0; i < n; ++i) {
      const int j = (i + k) % n;
      int can = 1;
      if (needsPeerAccess && i != j && cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess) {
        cudaGetLastError();
        can = 0;
      }
      if (!can) {
        unreachable.push_back(std::to_string(i) + "->" + std::to_string(j));
        continue;
      }
      map[gpu::cudaName(i)] = gpu::cudaName(j);
    }
    if (map.empty()) continue;
    gpu::Pair pair(map, "", channel + ",basic");
    pair.start();
    for (const auto& [from, to] : map) {
      const int i = std::stoi(from.substr(5));
      EXPECT_EQ(pair.channelFor(from, to), channel) << from << " -> " << to;
      for (int64_t count : {1, 4 << 10, 1 << 20, 20 << 20}) {  // up to 80 MB: split copies
        at::Tensor x = onDevice(count, i, 7);
        at::Tensor y = pair.rt().rpcSync("w1", "add_one", {x}).toTensor();
        EXPECT_EQ(y.device(), x.device()) << from << " -> " << to;
        EXPECT_TRUE(sameValues(y, x + 1)) << channel << " " << from << " -> " << to << " " << count;
      }
      // Freed and reallocated memory (same address, new allocation) is not served stale.
      for (int round = 0; round < 3; ++round) {
        at::Tensor x = at::full({1 << 20}, static_cast<float>(round),
                                at::TensorOptions().device(at::kCUDA, i));
        EXPECT_TRUE(sameValues(pair.rt().rpcSync("w1", runtime::kBuiltinEcho, {x}).toTensor(), x));
        x.reset();
        c10::cuda::CUDACachingAllocator::emptyCache();
      }
      covered.push_back(from.substr(5) + "->" + to.substr(5));
    }
  }
  std::string what = channel + " over " + std::to_string(covered.size()) + " device pair(s):";
  for (const auto& c : covered) what += " " + c;
  if (!unreachable.empty()) {
    what += "; no peer access, left out:";
    for (const auto& u : unreachable) what += " " + u;
  }
  devicesUsed(what);
  EXPECT_FALSE(covered.empty());
}

INSTANTIATE_TEST_SUITE_P(Gpu, Channels, ::testing::Values("cuda_nvlink", "cuda_ipc", "cuda_basic"));

// Two runtimes in one process (cuda_xth), b starting on a thread of its own.
// On a one-GPU machine this test used to end the whole test binary ("terminate
// called without an active exception"): its map named cuda:1, which b does not
// have, so a.start() threw the runtime's clear error; unwinding then destroyed
// the still-joinable std::thread that ran b.start(), and a joinable std::thread's
// destructor calls std::terminate. The runtime was right to throw; the thread
// must be joined however the scope is left (JoinOnExit), and the map names a GPU
// that exists.
TEST(Channels, CudaXthInOneProcess) {
  devicesUsed("a cuda:0 <-> b " + gpu::cudaName(workerGpu()) + ", one process");
  std::string peers = "a@127.0.0.1:" + std::to_string(gpu::freePort()) +
                      ",b@127.0.0.1:" + std::to_string(gpu::freePort());
  runtime::RuntimeOptions o;
  o.channels = {"cuda_xth", "basic"};
  o.deviceMaps["b"] = {{"cuda:0", gpu::cudaName(workerGpu())}};
  runtime::RuntimeOptions ob;
  ob.channels = o.channels;
  runtime::Runtime a(assignmentFromPeerList(peers), "a", o);
  runtime::Runtime b(assignmentFromPeerList(peers), "b", ob);
  gpu::registerGpuFunctions(b);
  {
    std::thread tb([&] { b.start(); });
    JoinOnExit joinB(tb);
    a.start();
  }
  at::Tensor x = onDevice(1 << 20, 0);
  at::Tensor y = a.rpcSync("b", "add_one", {x}).toTensor();
  EXPECT_EQ(y.device(), x.device());
  EXPECT_TRUE(sameValues(y, x + 1));
  bool seen = false;
  for (const auto& c : a.channelChoices()) {
    if (c.localDevice == "cuda:0" && c.remoteDevice == gpu::cudaName(workerGpu())) {
      EXPECT_EQ(c.channel, "cuda_xth");
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
  std::thread sb([&] { b.shutdown(); });
  JoinOnExit joinSb(sb);
  a.shutdown();
}

// The failure behind the crash above, kept as a test: one runtime's start() fails
// (its map names a GPU its peer lacks) while the other starts on a thread; the
// error is a clear RpcError and the process carries on.
TEST(Channels, StartErrorInOneProcessIsAnErrorNotAnAbort) {
  devicesUsed("a cuda:0 -> b " + missingDevice() + " (missing), one process");
  std::string peers = "a@127.0.0.1:" + std::to_string(gpu::freePort()) +
                      ",b@127.0.0.1:" + std::to_string(gpu::freePort());
  runtime::RuntimeOptions o;
  o.channels = {"cuda_xth", "basic"};
  o.deviceMaps["b"] = {{"cuda:0", missingDevice()}};
  o.startTimeout = std::chrono::seconds(20);
  runtime::RuntimeOptions ob = o;
  ob.deviceMaps.clear();
  runtime::Runtime a(assignmentFromPeerList(peers), "a", o);
  runtime::Runtime b(assignmentFromPeerList(peers), "b", ob);
  std::string error;
  {
    std::thread tb([&] {
      try {
        b.start();
      } catch (const std::exception&) {  // a may close first: b's own error is not the point
      }
    });
    JoinOnExit joinB(tb);
    try {
      a.start();
    } catch (const RpcError& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find(missingDevice()), std::string::npos) << error;
  EXPECT_NE(error.find("CUDA device(s)"), std::string::npos) << error;
  std::thread sb([&] { b.shutdown(runtime::ShutdownMode::kImmediate); });
  JoinOnExit joinSb(sb);
  a.shutdown(runtime::ShutdownMode::kImmediate);
}

TEST(Channels, UnviableGdrIsSkippedNotAborted) {
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", gpu::cudaName(workerGpu())}}, "", "cuda_gdr,cuda_basic,basic");
  pair.start();  // no InfiniBand here: cuda_gdr is skipped, cuda_basic serves
  std::string c = pair.channelFor("cuda:0", gpu::cudaName(workerGpu()));
  EXPECT_TRUE(c == "cuda_basic" || c == "cuda_gdr") << c;
  at::Tensor x = onDevice(1000, 0);
  EXPECT_TRUE(sameValues(pair.rt().rpcSync("w1", "add_one", {x}).toTensor(), x + 1));
}

// A small call (the shared-memory lane) answered inline with a CUDA tensor (the
// pipe), and a pipe message right behind it: TensorPipe may run that message's
// read callback inside the answer's write, on the lane's poller thread. It
// must not wait there for the frame being handled: it waited out the lane's
// 5 s limit and closed the pipe (the pipeline seed on one H100).
TEST(Lane, AnAnswerOnThePipeFromTheLanesPollerDoesNotStallIt) {
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", gpu::cudaName(workerGpu())}}, "", "");
  pair.start();
  auto& rt = pair.rt();
  const at::Tensor x = onDevice(1024, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 200; ++round) {
    std::vector<runtime::Future> calls;
    for (int i = 0; i < 4; ++i) {
      calls.push_back(rt.rpcAsync("w1", "make_on_inline", {gpu::cudaName(workerGpu()), 1.5}));
      calls.push_back(rt.rpcAsync("w1", "add_one", {x}));
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      try {
        const at::Tensor got = calls[i].valueOnStreams().toTensor();
        ASSERT_TRUE(sameValues(got, i % 2 == 0 ? at::full({1024}, 1.5) : x + 1)) << round;
      } catch (const std::exception& e) {
        FAIL() << "round " << round << ", call " << i << ": " << e.what();
      }
    }
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << round;
  }
}

// A request's CUDA tensors bound for another GPU travel as IPC handles in the
// lane's frames (cuda_lane/), not through TensorPipe: counted as lent, the
// values exact (one tensor, several in one message, a view at an offset, a
// strided one made contiguous), and every frame's memory given back once the
// server answered that it copied it.
// Whether cuda:0 and cuda:1 exist and reach each other: what the lane's CUDA
// frames need (one GPU shared by two workers keeps cuda_nvlink's own protocol).
bool twoPeerGpus() {
  int can = 0;
  if (gpu::gpuCount() < 2 || cudaDeviceCanAccessPeer(&can, 0, 1) != cudaSuccess || !can) {
    cudaGetLastError();
    return false;
  }
  return true;
}

// The lane comes up just after the handshake: calls go by the pipe until then.
// Calls w1 until one request went on the lane (bounded).
void waitForTheLane(runtime::Runtime& rt) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  const at::Tensor probe = onDevice(16, 0);
  for (;;) {
    const uint64_t lent = runtime::cuda_lane::counters().framesLent;
    ASSERT_TRUE(sameValues(rt.rpcSync("w1", "add_one", {probe}).toTensor(), probe + 1));
    if (runtime::cuda_lane::counters().framesLent > lent) return;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no request went on the lane";
  }
}

TEST(Lane, CudaTensorsTravelAsHandlesBetweenTwoGpus) {
  if (!twoPeerGpus()) GTEST_SKIP() << "needs two GPUs with peer access";
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", "cuda:1"}}, "", "");
  pair.start();
  auto& rt = pair.rt();
  waitForTheLane(rt);
  if (HasFatalFailure()) return;
  const uint64_t before = runtime::cuda_lane::counters().framesLent;
  int calls = 0;
  for (int64_t n : {1, 1000, 1 << 20, 25 << 20}) {
    at::Tensor x = onDevice(n, 0, 5);
    EXPECT_TRUE(sameValues(rt.rpcSync("w1", "add_one", {x}).toTensor(), x + 1)) << n;
    ++calls;
  }
  at::Tensor big = onDevice(1 << 22, 0);
  at::Tensor view = big.narrow(0, 12345, 1 << 20);
  EXPECT_TRUE(sameValues(rt.rpcSync("w1", runtime::kBuiltinEcho, {view}).toTensor(), view));
  at::Tensor strided = big.view({1024, 4096}).t();
  EXPECT_TRUE(sameValues(rt.rpcSync("w1", runtime::kBuiltinEcho, {strided}).toTensor(), strided));
  auto pairOf =
      rt.rpcSync("w1", runtime::kBuiltinEcho, {onDevice(7, 0, 1), onDevice(3 << 20, 0, 2)})
          .toTuple();
  EXPECT_TRUE(sameValues(pairOf->elements()[0].toTensor(), onDevice(7, 0, 1)));
  EXPECT_TRUE(sameValues(pairOf->elements()[1].toTensor(), onDevice(3 << 20, 0, 2)));
  calls += 3;
  // The server's kLaneCopied answers travel apart from the calls' answers (so
  // that those never wait for them): each comes, soon, and only then is the
  // lent memory let go.
  const auto settle = [] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (runtime::cuda_lane::counters().framesCopied !=
               runtime::cuda_lane::counters().framesLent &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  // Freed and reallocated memory (same address, a new allocation) is not served stale.
  for (int round = 0; round < 3; ++round) {
    at::Tensor x =
        at::full({1 << 20}, static_cast<float>(round), at::TensorOptions().device(at::kCUDA, 0));
    EXPECT_TRUE(sameValues(rt.rpcSync("w1", runtime::kBuiltinEcho, {x}).toTensor(), x)) << round;
    settle();  // the lent message holds x until then
    x.reset();
    c10::cuda::CUDACachingAllocator::emptyCache();
    ++calls;
  }
  EXPECT_EQ(runtime::cuda_lane::counters().framesLent - before, static_cast<uint64_t>(calls));
  settle();
  const auto after = runtime::cuda_lane::counters();
  EXPECT_EQ(after.framesCopied, after.framesLent) << "lent memory the server never answered for";
}

// Large tensors of a size that comes again go by landing offers: after the
// first, the server holds a buffer for the next of that size and the client
// copies into it itself (cuda_lane/README.md). Values exact in every shape of
// frame: one tensor, two of one size, a large one beside a small one (pulled),
// a size that changes; every frame still answered.
TEST(Lane, LargeTensorsArePushedIntoLandingOffers) {
  if (!twoPeerGpus()) GTEST_SKIP() << "needs two GPUs with peer access";
  if (!runtime::cuda_lane::landingHere()) GTEST_SKIP() << "RPCJOB_LANE_PUSH=0";
  devicesUsed(pairDevices());
  gpu::Pair pair({{"cuda:0", "cuda:1"}}, "", "");
  pair.start();
  auto& rt = pair.rt();
  waitForTheLane(rt);
  if (HasFatalFailure()) return;
  const auto pushed = [] { return runtime::cuda_lane::counters().tensorsPushed; };
  // One size, again and again: the first pulled, then (nearly) all pushed.
  const uint64_t before = pushed();
  constexpr int kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    at::Tensor x = onDevice(1 << 20, 0, round);
    EXPECT_TRUE(sameValues(rt.rpcSync("w1", "add_one", {x}).toTensor(), x + 1)) << round;
  }
  EXPECT_GE(pushed() - before, static_cast<uint64_t>(kRounds - 2)) << "offers were not used";
  // Two of one size in one message: two offers, both pushed the time after.
  for (int round = 0; round < 3; ++round) {
    const uint64_t was = pushed();
    auto two = rt.rpcSync("w1", runtime::kBuiltinEcho,
                          {onDevice(3 << 20, 0, 10 + round), onDevice(3 << 20, 0, 20 + round)})
                   .toTuple();
    EXPECT_TRUE(sameValues(two->elements()[0].toTensor(), onDevice(3 << 20, 0, 10 + round)));
    EXPECT_TRUE(sameValues(two->elements()[1].toTensor(), onDevice(3 << 20, 0, 20 + round)));
    if (round == 2) {
      EXPECT_EQ(pushed() - was, 2u);
    }
  }
  // A large tensor beside a small one: the large pushed, the small pulled.
  for (int round = 0; round < 3; ++round) {
    const uint64_t was = pushed();
    auto mixed = rt.rpcSync("w1", runtime::kBuiltinEcho,
                            {onDevice(5, 0, 30 + round), onDevice(1 << 20, 0, 40 + round)})
                     .toTuple();
    EXPECT_TRUE(sameValues(mixed->elements()[0].toTensor(), onDevice(5, 0, 30 + round)));
    EXPECT_TRUE(sameValues(mixed->elements()[1].toTensor(), onDevice(1 << 20, 0, 40 + round)));
    if (round > 0) {
      EXPECT_EQ(pushed() - was, 1u);
    }
  }
  // Sizes that change every call: pulled where no offer fits, exact
  // throughout. Then one size only: the offers of the sizes that stopped
  // coming (four of the five, and the two of 12 MiB above) go back unused
  // after HeldOffers::kUnusedFrames frames, and the lane keeps working.
  const uint64_t givenBack = runtime::cuda_lane::counters().offersGivenBack;
  for (int round = 0; round < 24; ++round) {
    at::Tensor x = onDevice((1 << 20) + (round % 5) * 4096, 0, 50 + round);
    EXPECT_TRUE(sameValues(rt.rpcSync("w1", "add_one", {x}).toTensor(), x + 1)) << round;
  }
  for (int round = 0; round < 12; ++round) {
    at::Tensor x = onDevice(1 << 20, 0, 80 + round);
    EXPECT_TRUE(sameValues(rt.rpcSync("w1", "add_one", {x}).toTensor(), x + 1)) << round;
  }
  EXPECT_GE(runtime::cuda_lane::counters().offersGivenBack - givenBack, 6u)
      << "offers of sizes that stopped coming were kept";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (runtime::cuda_lane::counters().framesCopied != runtime::cuda_lane::counters().framesLent &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto after = runtime::cuda_lane::counters();
  EXPECT_EQ(after.framesCopied, after.framesLent) << "a frame the server never answered";
}

TEST(Metrics, ServedInTheCudaBuild) {
  devicesUsed("cuda:0, one process");
  at::ones({1}, at::TensorOptions().device(at::kCUDA, 0));  // CUDA initialized
  metrics::Metrics m;
  metrics::HttpServerOptions o;
  o.bindAddress = "127.0.0.1";
  o.port = 0;
  metrics::HttpServer server(o, [&] { return m.collect(); });
  server.start();
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server.port());
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string body;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, n);
  close(fd);
  EXPECT_NE(body.find("200"), std::string::npos) << body.substr(0, 200);
  EXPECT_NE(body.find("rpcjob_"), std::string::npos) << body.substr(0, 400);
}

int main(int argc, char** argv) {
  rpcjob::gpu::runWorkerIfAsked();
  std::cout << "[ devices  ] this machine: " << rpcjob::gpu::gpuCount() << " CUDA device(s)"
            << std::endl;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
