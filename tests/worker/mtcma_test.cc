// The rpcjob_cma channel (worker/src/channels/mtcma/): exact bytes through real
// worker processes at the sizes around its inline/pool split, strided sources,
// the channel report, interoperation with a peer that does not allow it, and a
// hostile peer's control messages (the copy-channel skeleton cuda_nvlink shares).
#include <ATen/core/ivalue.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>
#include <tensorpipe/channel/channel.h>
#include <tensorpipe/channel/context.h>
#include <tensorpipe/common/cpu_buffer.h>
#include <tensorpipe/transport/connection.h>
#include <tensorpipe/transport/context.h>
#include <tensorpipe/transport/listener.h>
#include <tensorpipe/transport/uv/factory.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <vector>

#include "channels/mtcma/mtcma_channel.h"
#include "cluster.h"

namespace rpcjob::testing {
namespace {

// Bytes 0..250 repeating (251 is prime, so chunk boundaries never line up with it).
at::Tensor pattern(int64_t bytes) {
  return at::arange(bytes, at::TensorOptions().dtype(at::kLong)).remainder(251).to(at::kByte);
}

std::string channelWith(runtime::Runtime& rt, const std::string& peer) {
  for (const auto& c : rt.channelChoices()) {
    if (c.peer == peer && c.localDevice == "cpu:0" && c.remoteDevice == "cpu:0") return c.channel;
  }
  return "";
}

class MtCmaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster(2); }
  static void TearDownTestSuite() {
    for (int code : cluster_->shutdown()) EXPECT_EQ(code, 0);
    delete cluster_;
  }
  static runtime::Runtime& rt() { return cluster_->driver(); }
  static Cluster* cluster_;
};
Cluster* MtCmaTest::cluster_ = nullptr;

TEST(MtCmaContext, ViableHereWithTheCmaStyleDescriptor) {
  auto context = runtime::channels::createMtCmaChannel(3);
  ASSERT_TRUE(context->isViable()) << "process_vm_readv between our processes should work here";
  EXPECT_EQ(context->numConnectionsNeeded(), 1u);
  const auto& descriptors = context->deviceDescriptors();
  ASSERT_EQ(descriptors.size(), 1u);
  const std::string& mine = descriptors.begin()->second;
  EXPECT_EQ(mine.rfind("rpcjob_cma:", 0), 0u) << mine;
  EXPECT_TRUE(context->canCommunicateWithRemote(mine, mine));
  EXPECT_FALSE(context->canCommunicateWithRemote(mine, mine + "x"));  // other uid, boot, ...
  EXPECT_FALSE(context->canCommunicateWithRemote(mine, ""));
  context->join();
}

TEST_F(MtCmaTest, TheChannelReportNamesRpcjobCmaBetweenLocalWorkers) {
  EXPECT_EQ(channelWith(rt(), "w1"), "rpcjob_cma");
  EXPECT_EQ(channelWith(rt(), "w2"), "rpcjob_cma");
  // And between the two worker processes.
  EXPECT_EQ(rt().rpcSync("w1", "call_peer", {std::string("w2"), int64_t{7}}).toInt(), 7);
}

TEST_F(MtCmaTest, ExactBytesAroundTheInlineAndPoolSplit) {
  const int64_t MiB = int64_t{1} << 20;
  // chunk_plan.h: one piece below 512 KiB; from there the receiving thread reads
  // one piece beside the pool while pieces stay <= 1 MiB (2 MiB + 5 with this
  // machine's pool), above that the pool alone (64 MiB + 7).
  for (int64_t bytes :
       {int64_t{0}, int64_t{1}, MiB / 2 - 1, MiB / 2, MiB - 1, MiB, 2 * MiB + 5, 64 * MiB + 7}) {
    SCOPED_TRACE(bytes);
    at::Tensor sent = pattern(bytes);
    at::Tensor back = rt().rpcSync("w1", "identity", {sent}).toTensor();
    ASSERT_EQ(back.numel(), bytes);
    EXPECT_TRUE(at::equal(back, sent));
  }
}

TEST_F(MtCmaTest, StridedSourcesArriveContiguousAndExact) {
  // 3000 x 2048 bytes (~6 MiB), transposed and sliced: neither is contiguous.
  at::Tensor base = pattern(3000 * 2048).reshape({3000, 2048});
  for (const at::Tensor& view : {base.t(), base.slice(1, 1, 2047, 3)}) {
    ASSERT_FALSE(view.is_contiguous());
    at::Tensor back = rt().rpcSync("w1", "identity", {view}).toTensor();
    EXPECT_TRUE(back.is_contiguous());
    EXPECT_EQ(back.sizes(), view.sizes());
    EXPECT_TRUE(at::equal(back, view));
  }
}

TEST_F(MtCmaTest, SeveralLargeTensorsInOneCallAndConcurrentCalls) {
  const int64_t MiB = int64_t{1} << 20;
  std::vector<runtime::Future> futures;
  std::vector<at::Tensor> sent;
  for (int i = 0; i < 4; ++i) {
    sent.push_back(pattern(3 * MiB + i * 4099).roll(i));
    futures.push_back(rt().rpcAsync(i % 2 ? "w2" : "w1", "identity",
                                    {c10::List<at::Tensor>({sent.back(), sent.back().flip(0)})}));
  }
  for (int i = 0; i < 4; ++i) {
    auto list = futures[i].value().toTensorList();
    EXPECT_TRUE(at::equal(list.get(0), sent[i]));
    EXPECT_TRUE(at::equal(list.get(1), sent[i].flip(0)));
  }
}

// RPCJOB_MTCMA_SPIN_US: the pool's threads poll for work before they sleep, in
// every process (the workers inherit it); transfers stay exact, one after
// another (threads spinning) and several at once, and the processes exit.
TEST(MtCmaSpinningPool, TransfersStayExactAndWorkersExit) {
  ::setenv("RPCJOB_MTCMA_SPIN_US", "2000", 1);
  {
    Cluster cluster(2);
    ::unsetenv("RPCJOB_MTCMA_SPIN_US");
    const int64_t MiB = int64_t{1} << 20;
    for (int64_t bytes : {MiB / 2, 2 * MiB + 5, 4 * MiB, 64 * MiB + 7}) {
      SCOPED_TRACE(bytes);
      at::Tensor sent = pattern(bytes).roll(bytes % 13);
      at::Tensor back = cluster.driver().rpcSync("w1", "identity", {sent}).toTensor();
      EXPECT_TRUE(at::equal(back, sent));
    }
    std::vector<runtime::Future> futures;
    std::vector<at::Tensor> sent;
    for (int i = 0; i < 6; ++i) {
      sent.push_back(pattern(3 * MiB + i * 4099).roll(i));
      futures.push_back(cluster.driver().rpcAsync(i % 2 ? "w2" : "w1", "identity", {sent.back()}));
    }
    for (int i = 0; i < 6; ++i) EXPECT_TRUE(at::equal(futures[i].value().toTensor(), sent[i]));
    for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
  }
  ::unsetenv("RPCJOB_MTCMA_SPIN_US");
}

// A driver that allows only cma and basic: the workers (rpcjob_cma first) fall
// back to cma with it, since TensorPipe picks only channels both sides have.
TEST(MtCmaInterop, APeerWithoutRpcjobCmaFallsBackToCma) {
  runtime::RuntimeOptions options;
  options.channels = {"cma", "basic"};
  Cluster cluster(1, options);
  EXPECT_EQ(channelWith(cluster.driver(), "w1"), "cma");
  at::Tensor sent = pattern((int64_t{8} << 20) + 3);
  at::Tensor back = cluster.driver().rpcSync("w1", "identity", {sent}).toTensor();
  EXPECT_TRUE(at::equal(back, sent));
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// A control message that is not one: the wrong size, or a kind the protocol
// lacks. The channel must fail what is pending with a clear error and take no
// more, never crash or hang, or read memory for it.
TEST(MtCmaHostilePeer, AMalformedControlMessageFailsTheChannelWithAClearError) {
  auto context = runtime::channels::createMtCmaChannel(2);
  if (!context->isViable()) GTEST_SKIP() << "rpcjob_cma is not viable here";
  struct Case {
    std::vector<char> bytes;
    std::string error;
  };
  std::vector<char> unknownKind(40, 0);  // the right size, kind 99
  const uint32_t kind = 99;
  std::memcpy(unknownKind.data(), &kind, sizeof(kind));
  for (const Case& c : {Case{std::vector<char>(7, 'x'), "malformed control message (7 bytes)"},
                        Case{std::vector<char>(41, 0), "malformed control message (41 bytes)"},
                        Case{unknownKind, "unknown control message kind"}}) {
    SCOPED_TRACE(c.error);
    auto transport = tensorpipe::transport::uv::create();
    auto listener = transport->listen("127.0.0.1");
    std::promise<std::shared_ptr<tensorpipe::transport::Connection>> accepted;
    listener->accept([&](const tensorpipe::Error& error,
                         std::shared_ptr<tensorpipe::transport::Connection> connection) {
      accepted.set_value(error ? nullptr : connection);
    });
    auto hostile = transport->connect(listener->addr());
    auto ours = accepted.get_future();
    ASSERT_EQ(ours.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    auto channel = context->createChannel({ours.get()}, tensorpipe::channel::Endpoint::kListen);

    std::promise<std::string> written;
    hostile->write(c.bytes.data(), c.bytes.size(), [&](const tensorpipe::Error& error) {
      written.set_value(error ? error.what() : "");
    });
    char buffer[16];
    std::promise<std::string> received;
    channel->recv(
        tensorpipe::CpuBuffer{buffer}, sizeof(buffer),
        [&](const tensorpipe::Error& error) { received.set_value(error ? error.what() : ""); });
    auto outcome = received.get_future();
    ASSERT_EQ(outcome.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "the receive neither completed nor failed";
    const std::string error = outcome.get();
    EXPECT_NE(error.find("rpcjob_cma: " + c.error), std::string::npos) << error;

    channel->close();
    hostile->close();
    listener->close();
    transport->join();
    written.get_future().wait();
  }
  context->join();
}

}  // namespace
}  // namespace rpcjob::testing
