// GPU tests (CUDA build, run on the GPU machine by tests/gpu/run-all.sh): device
// map validation, exact values across devices, stream ordering after a
// non-blocking wait, `then` on pool streams, every viable CUDA channel (each
// forced through the allowed-channel set, rpcjob's cuda_nvlink included), and
// /metrics served from a process that links the CUDA libtorch.
#include <arpa/inet.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

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

}  // namespace

TEST(DeviceMaps, LocalDeviceMustExist) {
  std::string e = startError({{"cuda:7", "cuda:0"}});
  EXPECT_NE(e.find("cuda:7"), std::string::npos) << e;
  EXPECT_NE(e.find("w1"), std::string::npos) << e;
}

TEST(DeviceMaps, MustBeOneToOne) {
  std::string e = startError({{"cuda:0", "cuda:1"}, {"cuda:1", "cuda:1"}});
  EXPECT_NE(e.find("one-to-one"), std::string::npos) << e;
}

TEST(DeviceMaps, BadDeviceName) {
  std::string e = startError({{"gpu0", "cuda:1"}});
  EXPECT_NE(e.find("gpu0"), std::string::npos) << e;
}

TEST(DeviceMaps, RemoteDeviceMustExist) {
  std::string e = startError({{"cuda:0", "cuda:5"}});
  EXPECT_NE(e.find("cuda:5"), std::string::npos) << e;
  EXPECT_NE(e.find("w1"), std::string::npos) << e;
}

TEST(DeviceMaps, UnmappedTensorIsAClearError) {
  gpu::Pair pair({}, "", "");
  pair.start();
  try {
    pair.rt().rpcSync("w1", "device_of", {onDevice(16, 1)});
    FAIL() << "no error";
  } catch (const RpcError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:1"), std::string::npos) << m;
    EXPECT_NE(m.find("w1"), std::string::npos) << m;
  }
}

TEST(DeviceMaps, ResponseUsesInverseMapAndCpuToGpu) {
  gpu::Pair pair({{"cuda:0", "cuda:1"}, {"cpu", "cuda:0"}}, "", "");
  pair.start();
  auto& rt = pair.rt();
  EXPECT_EQ(rt.rpcSync("w1", "device_of", {onDevice(16, 0)}).toStringRef(), "cuda:1");
  EXPECT_EQ(rt.rpcSync("w1", "device_of", {at::ones({4})}).toStringRef(), "cuda:0");
  // w1 answers with a tensor on cuda:1: the inverse map brings it to cuda:0 here.
  at::Tensor t = rt.rpcSync("w1", "make_on", {std::string("cuda:1"), 2.5}).toTensor();
  EXPECT_EQ(t.device(), c10::Device(at::kCUDA, 0));
  EXPECT_TRUE(at::equal(t.cpu(), at::full({1024}, 2.5)));
  // A CPU tensor sent to cuda:0 there comes back to the host.
  at::Tensor h = at::arange(0, 100, at::kFloat);
  at::Tensor back = rt.rpcSync("w1", runtime::kBuiltinEcho, {h}).toTensor();
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_TRUE(at::equal(back, h));
  // A tensor on cuda:1 here has no mapping.
  EXPECT_THROW(rt.rpcSync("w1", "device_of", {onDevice(4, 1)}), RpcError);
}

TEST(Values, ExactAcrossDevices) {
  gpu::Pair pair({{"cuda:0", "cuda:1"}}, "", "");
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

TEST(Streams, KernelAfterNonBlockingWaitSeesTheData) {
  gpu::Pair pair({{"cuda:0", "cuda:1"}}, "", "");
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
  gpu::Pair pair({{"cuda:0", "cuda:1"}}, "", "");
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

TEST_P(Channels, ForcedChannelMovesExactValues) {
  const std::string channel = GetParam();
  gpu::Pair pair({{"cuda:0", "cuda:1"}}, "", channel + ",basic");
  pair.start();
  EXPECT_EQ(pair.channelFor("cuda:0", "cuda:1"), channel);
  for (int64_t n : {1, 4 << 10, 1 << 20, 20 << 20}) {  // up to 80 MB: split copies
    at::Tensor x = onDevice(n, 0, 7);
    EXPECT_TRUE(sameValues(pair.rt().rpcSync("w1", "add_one", {x}).toTensor(), x + 1))
        << channel << " " << n;
  }
  // Freed and reallocated memory (same address, new allocation) is not served stale.
  for (int i = 0; i < 3; ++i) {
    at::Tensor x =
        at::full({1 << 20}, static_cast<float>(i), at::TensorOptions().device(at::kCUDA, 0));
    EXPECT_TRUE(sameValues(pair.rt().rpcSync("w1", runtime::kBuiltinEcho, {x}).toTensor(), x));
    x.reset();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, Channels, ::testing::Values("cuda_nvlink", "cuda_ipc", "cuda_basic"));

TEST(Channels, CudaXthInOneProcess) {
  std::string peers = "a@127.0.0.1:" + std::to_string(gpu::freePort()) +
                      ",b@127.0.0.1:" + std::to_string(gpu::freePort());
  runtime::RuntimeOptions o;
  o.channels = {"cuda_xth", "basic"};
  o.deviceMaps["b"] = {{"cuda:0", "cuda:1"}};
  runtime::RuntimeOptions ob;
  ob.channels = o.channels;
  runtime::Runtime a(assignmentFromPeerList(peers), "a", o);
  runtime::Runtime b(assignmentFromPeerList(peers), "b", ob);
  gpu::registerGpuFunctions(b);
  std::thread tb([&] { b.start(); });
  a.start();
  tb.join();
  at::Tensor x = onDevice(1 << 20, 0);
  EXPECT_TRUE(sameValues(a.rpcSync("b", "add_one", {x}).toTensor(), x + 1));
  for (const auto& c : a.channelChoices()) {
    if (c.localDevice == "cuda:0" && c.remoteDevice == "cuda:1") {
      EXPECT_EQ(c.channel, "cuda_xth");
    }
  }
  std::thread sb([&] { b.shutdown(); });
  a.shutdown();
  sb.join();
}

TEST(Channels, UnviableGdrIsSkippedNotAborted) {
  gpu::Pair pair({{"cuda:0", "cuda:1"}}, "", "cuda_gdr,cuda_basic,basic");
  pair.start();  // no InfiniBand here: cuda_gdr is skipped, cuda_basic serves
  std::string c = pair.channelFor("cuda:0", "cuda:1");
  EXPECT_TRUE(c == "cuda_basic" || c == "cuda_gdr") << c;
  at::Tensor x = onDevice(1000, 0);
  EXPECT_TRUE(sameValues(pair.rt().rpcSync("w1", "add_one", {x}).toTensor(), x + 1));
}

TEST(Metrics, ServedInTheCudaBuild) {
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
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
