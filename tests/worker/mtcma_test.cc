// The rpcjob_cma channel (worker/src/channels/mtcma/): exact bytes through real
// worker processes at the sizes around its inline/pool split, strided sources,
// the channel report, interoperation with a peer that does not allow it, a
// hostile peer's control messages (the copy-channel skeleton cuda_nvlink shares),
// and the shared paths: tensors in the sender's arena (host_memory/) are read
// from a mapping, both ways and when forwarded; private tensors are pushed by
// the sender into the receiver's arena; a forged region is an error, and so is
// a hostile peer's push request or answer.
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

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "channels/mtcma/mtcma_channel.h"
#include "channels/mtcma/wire_message.h"
#include "cluster.h"
#include "host_memory/shared_arena.h"
#include "rpcjob/runtime/shared_host.h"

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
  // The wire's version is part of it: peers of another version do not pair.
  EXPECT_EQ(mine.rfind("rpcjob_cma/3:", 0), 0u) << mine;
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

// A raw TensorPipe connection (`hostile`, which the test writes control
// messages on by hand) to a fresh channel of `context` that listens on the other
// end: what a broken or hostile peer of rpcjob_cma looks like.
struct RawPeer {
  explicit RawPeer(tensorpipe::channel::Context& context)
      : transport(tensorpipe::transport::uv::create()), listener(transport->listen("127.0.0.1")) {
    std::promise<std::shared_ptr<tensorpipe::transport::Connection>> accepted;
    listener->accept([&](const tensorpipe::Error& error,
                         std::shared_ptr<tensorpipe::transport::Connection> connection) {
      accepted.set_value(error ? nullptr : connection);
    });
    hostile = transport->connect(listener->addr());
    auto ours = accepted.get_future();
    if (ours.wait_for(std::chrono::seconds(10)) == std::future_status::ready) {
      channel = context.createChannel({ours.get()}, tensorpipe::channel::Endpoint::kListen);
    }
  }
  bool connected() const { return channel != nullptr; }
  void close() {
    if (channel) channel->close();
    hostile->close();
    listener->close();
    transport->join();
  }

  std::shared_ptr<tensorpipe::transport::Context> transport;
  std::shared_ptr<tensorpipe::transport::Listener> listener;
  std::shared_ptr<tensorpipe::transport::Connection> hostile;
  std::shared_ptr<tensorpipe::channel::Channel> channel;
};

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
  constexpr size_t kWire = sizeof(runtime::channels::MtCmaWire);
  std::vector<char> unknownKind(kWire, 0);  // the right size, kind 99
  const uint32_t kind = 99;
  std::memcpy(unknownKind.data(), &kind, sizeof(kind));
  auto bytesOf = [](const runtime::channels::MtCmaWire& m) {
    const char* p = reinterpret_cast<const char*>(&m);
    return std::vector<char>(p, p + sizeof(m));
  };
  runtime::channels::MtCmaWire answer;  // to a push request never made
  answer.kind = runtime::channels::CopyKind::kPushed;
  answer.seq = 5;
  runtime::channels::MtCmaWire ours;  // asks us to write into our own memory
  ours.kind = runtime::channels::CopyKind::kPushRequest;
  ours.seq = 1;
  ours.pid = ::getpid();
  ours.length = 16;
  for (const Case& c :
       {Case{std::vector<char>(7, 'x'), "malformed control message (7 bytes)"},
        Case{std::vector<char>(40, 0), "malformed control message (40 bytes)"},  // version 1's
        Case{std::vector<char>(kWire + 1, 0),
             "malformed control message (" + std::to_string(kWire + 1) + " bytes)"},
        Case{unknownKind, "unknown control message kind"},
        Case{bytesOf(answer), "a push answer for no receive asked"},
        Case{bytesOf(ours), "a push request names a region of this process"}}) {
    SCOPED_TRACE(c.error);
    RawPeer peer(*context);
    ASSERT_TRUE(peer.connected());
    auto& hostile = peer.hostile;
    auto& channel = peer.channel;

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

    peer.close();
    written.get_future().wait();
  }
  context->join();
}

// Transfers a process received over rpcjob_cma, by how: read from a mapping of
// the sender's region, read with process_vm_readv, written by the sender (push).
struct Reads {
  int64_t shared = 0, cma = 0, pushed = 0;
  bool operator==(const Reads& o) const {
    return shared == o.shared && cma == o.cma && pushed == o.pushed;
  }
};
std::ostream& operator<<(std::ostream& out, const Reads& r) {
  return out << "{shared " << r.shared << ", cma " << r.cma << ", pushed " << r.pushed << "}";
}
Reads reads(int64_t shared, int64_t cma, int64_t pushed) {
  return Reads{shared, cma, pushed};
}

// `worker`'s counts ("driver": this process's).
Reads receivedBy(runtime::Runtime& rt, const std::string& worker) {
  if (worker == "driver") {
    const auto c = runtime::channels::mtCmaCounters();
    return reads(static_cast<int64_t>(c.sharedReads), static_cast<int64_t>(c.cmaReads),
                 static_cast<int64_t>(c.pushedReads));
  }
  const auto t = rt.rpcSync(worker, "mtcma_counters", {}).toTupleRef().elements();
  return reads(t.at(0).toInt(), t.at(1).toInt(), t.at(2).toInt());
}

// The change in each count between construction and delta().
struct Counted {
  Counted(runtime::Runtime& rt, std::string worker) : rt_(rt), worker_(std::move(worker)) {
    before_ = receivedBy(rt_, worker_);
  }
  Reads delta() {
    const Reads now = receivedBy(rt_, worker_);
    // The counter call itself moves no tensor over rpcjob_cma.
    return reads(now.shared - before_.shared, now.cma - before_.cma, now.pushed - before_.pushed);
  }
  runtime::Runtime& rt_;
  std::string worker_;
  Reads before_;
};

at::Tensor inArena(const at::Tensor& values) {
  at::Tensor t = runtime::emptySharedHost(values.sizes(), values.options());
  t.copy_(values);
  return t;
}

TEST_F(MtCmaTest, AnArenaTensorIsReadFromAMappingBothWays) {
  const int64_t bytes = (int64_t{8} << 20) + 5;
  at::Tensor sent = inArena(pattern(bytes));
  ASSERT_TRUE(runtime::isSharedHost(sent));
  Counted worker(rt(), "w1"), driver(rt(), "driver");
  at::Tensor back = rt().rpcSync("w1", "identity", {sent}).toTensor();
  EXPECT_TRUE(at::equal(back, sent));
  // The request from our arena, the response from the worker's (a received
  // tensor of 4 MiB and more lands there).
  EXPECT_EQ(worker.delta(), reads(1, 0, 0));
  EXPECT_EQ(driver.delta(), reads(1, 0, 0));
  EXPECT_TRUE(runtime::isSharedHost(back));
  // Again: the mappings are cached, the bytes still exact after a change.
  sent.mul_(3);
  back = rt().rpcSync("w1", "identity", {sent}).toTensor();
  EXPECT_TRUE(at::equal(back, sent));
  EXPECT_EQ(worker.delta(), reads(2, 0, 0));
}

TEST_F(MtCmaTest, ARangeInsideARegionAtAnOffsetIsReadExactly) {
  const int64_t MiB = int64_t{1} << 20;
  at::Tensor region = inArena(pattern(12 * MiB));
  for (int64_t start : {int64_t{1}, int64_t{4099}, 5 * MiB + 3}) {
    SCOPED_TRACE(start);
    at::Tensor view = region.slice(0, start, start + 6 * MiB + 1);  // contiguous, not at the start
    ASSERT_TRUE(view.is_contiguous());
    Counted worker(rt(), "w1");
    at::Tensor back = rt().rpcSync("w1", "identity", {view}).toTensor();
    EXPECT_TRUE(at::equal(back, view));
    EXPECT_EQ(worker.delta(), reads(1, 0, 0));
  }
}

TEST_F(MtCmaTest, APlainTensorIsPushedIntoTheWorkersArenaAndComesBackFromIt) {
  for (int64_t bytes : {int64_t{4} << 20, (int64_t{8} << 20) + 5}) {
    SCOPED_TRACE(bytes);
    at::Tensor sent = pattern(bytes);
    ASSERT_FALSE(runtime::isSharedHost(sent));
    Counted worker(rt(), "w1"), driver(rt(), "driver");
    at::Tensor back = rt().rpcSync("w1", "identity", {sent}).toTensor();
    EXPECT_TRUE(at::equal(back, sent));
    // We wrote into the region the worker received into; it sent that back.
    EXPECT_EQ(worker.delta(), reads(0, 0, 1));
    EXPECT_EQ(driver.delta(), reads(1, 0, 0));
    EXPECT_TRUE(rt().rpcSync("w1", "is_shared_host", {sent}).toBool());
  }
  // Below 4 MiB a received tensor is libtorch's: no region to push into, so the
  // worker reads ours with process_vm_readv, and we its answer.
  at::Tensor small = pattern(int64_t{3} << 20);
  Counted worker(rt(), "w1"), driver(rt(), "driver");
  EXPECT_FALSE(rt().rpcSync("w1", "is_shared_host", {small}).toBool());
  at::Tensor back = rt().rpcSync("w1", "identity", {small}).toTensor();
  EXPECT_TRUE(at::equal(back, small));
  EXPECT_EQ(worker.delta(), reads(0, 2, 0));
  EXPECT_EQ(driver.delta(), reads(0, 1, 0));
}

// Bytes pushed into a view of a region at an odd offset, and a source that
// starts at an odd address, arrive exact; so do several pushes in one message.
TEST_F(MtCmaTest, PushedBytesAreExactAtOddAddressesAndSeveralInOneCall) {
  at::Tensor big = pattern((int64_t{13} << 20) + 7);
  at::Tensor odd = big.slice(0, 3, 3 + (int64_t{5} << 20) + 1);  // contiguous, odd start
  ASSERT_TRUE(odd.is_contiguous());
  Counted worker(rt(), "w1");
  at::Tensor back = rt().rpcSync("w1", "identity", {odd}).toTensor();
  EXPECT_TRUE(at::equal(back, odd));
  auto list = c10::List<at::Tensor>({pattern(int64_t{4} << 20), odd, pattern(int64_t{6} << 20)});
  auto backList = rt().rpcSync("w1", "identity", {list}).toTensorList();
  ASSERT_EQ(backList.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(backList.get(i), list.get(i))) << i;
  EXPECT_EQ(worker.delta(), reads(0, 0, 4));
}

TEST_F(MtCmaTest, AResultAWorkerMakesIsPushedIntoOurArena) {
  // The control of SharedHostAllocatorCluster below: without the allocator a
  // tensor libtorch makes in the worker is private memory, so the worker
  // writes it into the region we receive it in.
  at::Tensor a = pattern((int64_t{6} << 20) + 3);
  Counted driver(rt(), "driver");
  at::Tensor back = rt().rpcSync("w1", "add", {a, a}).toTensor();
  EXPECT_TRUE(at::equal(back, a.add(a)));
  EXPECT_EQ(driver.delta(), reads(0, 0, 1));
}

TEST_F(MtCmaTest, AForwardedTensorTakesTheSharedPath) {
  // driver -> w1 by cma; w1 forwards what it received to w2, w2 echoes it:
  // both hops between the workers read the sender's arena.
  const int64_t bytes = (int64_t{6} << 20) + 11;
  at::Tensor sent = pattern(bytes);
  Counted w1(rt(), "w1"), w2(rt(), "w2");
  at::Tensor back = rt().rpcSync("w1", "call_peer", {std::string("w2"), sent}).toTensor();
  EXPECT_TRUE(at::equal(back, sent));
  EXPECT_EQ(w1.delta(), reads(1, 0, 1));  // w2's answer mapped; ours pushed
  EXPECT_EQ(w2.delta(), reads(1, 0, 0));  // w1's forward
}

// A hostile or broken peer's send naming a shared region: the receive fails
// with the reason, the peer gets a failed ack, and nothing is read outside the
// region; the genuine region is read.
class ForgedRegion : public ::testing::Test {
 protected:
  struct Outcome {
    std::string recvError;  // "" success
    uint32_t ackStatus = 99;
  };

  // Sends `m` on a raw connection to a fresh rpcjob_cma channel that receives
  // m.length bytes into `into`.
  Outcome deliver(runtime::channels::MtCmaWire m, char* into) {
    auto context = runtime::channels::createMtCmaChannel(2);
    EXPECT_TRUE(context->isViable());
    RawPeer peer(*context);
    EXPECT_TRUE(peer.connected());
    if (!peer.connected()) {
      peer.close();
      context->join();
      return Outcome{"no connection", 99};
    }
    auto& hostile = peer.hostile;
    auto& channel = peer.channel;
    std::promise<uint32_t> acked;
    hostile->read([&](const tensorpipe::Error& error, const void* ptr, size_t length) {
      runtime::channels::MtCmaWire ack;
      if (error || length != sizeof(ack)) {
        acked.set_value(98);
        return;
      }
      std::memcpy(&ack, ptr, sizeof(ack));
      acked.set_value(ack.kind == runtime::channels::CopyKind::kAck ? ack.status : 97);
    });
    std::promise<void> written;
    hostile->write(&m, sizeof(m), [&](const tensorpipe::Error&) { written.set_value(); });
    std::promise<std::string> received;
    channel->recv(tensorpipe::CpuBuffer{into}, m.length, [&](const tensorpipe::Error& error) {
      received.set_value(error ? error.what() : "");
    });
    Outcome outcome;
    auto r = received.get_future();
    auto a = acked.get_future();
    EXPECT_EQ(r.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "the receive neither completed nor failed";
    EXPECT_EQ(a.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "no ack";
    outcome.recvError = r.get();
    outcome.ackStatus = a.get();
    peer.close();
    written.get_future().wait();
    context->join();
    return outcome;
  }

  // A send of `length` bytes at `offset` of a region of this process's arena.
  runtime::channels::MtCmaWire genuine(const at::Tensor& region, uint64_t offset, uint64_t length) {
    runtime::channels::MtCmaWire m;
    m.kind = runtime::channels::CopyKind::kSend;
    m.seq = 1;
    m.pid = ::getpid();
    m.address = 0;  // never read: the region is
    m.length = length;
    // The fd, id and token as the sender's describe() puts them.
    const auto& arena = runtime::host_memory::SharedArena::instance();
    auto span = arena.find(region.data_ptr(), region.nbytes());
    EXPECT_TRUE(span.has_value());
    if (span) {
      m.regionFd = span->fd;
      m.token = arena.token();
      m.regionId = span->id;
    }
    m.regionOffset = offset;
    return m;
  }
};

TEST_F(ForgedRegion, TheGenuineRegionIsReadAndForgedOnesAreErrorsOnBothSides) {
  at::Tensor region = inArena(pattern(int64_t{2} << 20));
  const runtime::channels::MtCmaWire good = genuine(region, 4096, 8192);
  ASSERT_GE(good.regionFd, 0) << "the region's memfd was not found in /proc/self/fd";
  std::vector<char> into(1 << 20, 0);
  const uint64_t shared = runtime::channels::mtCmaCounters().sharedReads;
  const runtime::HostReceivePaths paths = runtime::hostReceivePaths();
  Outcome ok = deliver(good, into.data());
  EXPECT_EQ(ok.recvError, "");
  EXPECT_EQ(ok.ackStatus, 0u);
  EXPECT_EQ(std::memcmp(into.data(), static_cast<const char*>(region.data_ptr()) + 4096, 8192), 0);
  EXPECT_EQ(runtime::channels::mtCmaCounters().sharedReads, shared + 1);
  // The public counts (what rpcjob-bench reports a round trip's path by) say the same.
  const runtime::HostReceivePaths after = runtime::hostReceivePaths();
  EXPECT_EQ(after.sharedReads, paths.sharedReads + 1);
  EXPECT_EQ(after.sharedBytes, paths.sharedBytes + 8192);
  EXPECT_EQ(after.cmaReads, paths.cmaReads);
  EXPECT_EQ(after.pushedReads, paths.pushedReads);

  const int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct Case {
    const char* what;
    runtime::channels::MtCmaWire m;
    std::string error;
  };
  std::vector<Case> cases;
  auto with = [&](auto change) {
    runtime::channels::MtCmaWire m = good;
    change(m);
    return m;
  };
  cases.push_back(
      {"not a memfd", with([&](auto& m) { m.regionFd = devNull; }), "is not that rpcjob region"});
  cases.push_back(
      {"another id", with([](auto& m) { m.regionId += 7; }), "is not that rpcjob region"});
  cases.push_back(
      {"another token", with([](auto& m) { m.token ^= 1; }), "is not that rpcjob region"});
  cases.push_back({"no such fd", with([](auto& m) { m.regionFd = 1 << 20; }), "cannot open"});
  cases.push_back({"negative fd", with([](auto& m) { m.regionFd = -2; }), "no such process"});
  cases.push_back({"no such pid", with([](auto& m) { m.pid = -5; }), "no such process"});
  cases.push_back(
      {"offset past the end", with([](auto& m) { m.regionOffset = 2 << 20; }), "outside"});
  cases.push_back({"range straddles the end",
                   with([](auto& m) { m.regionOffset = (2 << 20) - 100; }), "outside"});
  cases.push_back(
      {"offset wraps", with([](auto& m) { m.regionOffset = ~uint64_t{0} - 10; }), "outside"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::fill(into.begin(), into.end(), 0);
    Outcome bad = deliver(c.m, into.data());
    EXPECT_NE(bad.recvError.find("rpcjob_cma: "), std::string::npos) << bad.recvError;
    EXPECT_NE(bad.recvError.find(c.error), std::string::npos) << bad.recvError;
    EXPECT_EQ(bad.ackStatus, 1u) << "the sender must learn the read failed";
    EXPECT_TRUE(std::all_of(into.begin(), into.end(), [](char b) { return b == 0; }))
        << "nothing may be copied";
  }
  ::close(devNull);
}

// The control messages a channel writes to a raw peer, in order.
class Inbox {
 public:
  explicit Inbox(std::shared_ptr<tensorpipe::transport::Connection> connection)
      : state_(std::make_shared<State>()) {
    readNext(std::move(connection), state_);
  }
  // The next message; none within `wait` (or the connection failed): nullopt.
  std::optional<runtime::channels::MtCmaWire> take(
      std::chrono::milliseconds wait = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait_for(lock, wait, [&] { return !state_->messages.empty() || state_->closed; });
    if (state_->messages.empty()) return std::nullopt;
    auto m = state_->messages.front();
    state_->messages.pop_front();
    return m;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<runtime::channels::MtCmaWire> messages;
    bool closed = false;
  };
  static void readNext(std::shared_ptr<tensorpipe::transport::Connection> connection,
                       std::shared_ptr<State> state) {
    auto* c = connection.get();
    c->read([connection, state](const tensorpipe::Error& error, const void* ptr, size_t length) {
      std::lock_guard<std::mutex> lock(state->mu);
      if (error || length != sizeof(runtime::channels::MtCmaWire)) {
        state->closed = true;
        state->cv.notify_all();
        return;
      }
      runtime::channels::MtCmaWire m;
      std::memcpy(&m, ptr, sizeof(m));
      state->messages.push_back(m);
      state->cv.notify_all();
      readNext(connection, state);
    });
  }
  std::shared_ptr<State> state_;
};

// The push, message by message, with this test as the other side: a fresh
// channel receives into a region of this process's arena while the raw peer
// plays a sender whose bytes are private (or the channel sends, and the raw
// peer plays the receiver).
class MtCmaPush : public ::testing::Test {
 protected:
  static constexpr int64_t kBytes = int64_t{1} << 20;  // at least kMinPush

  void SetUp() override {
    context_ = runtime::channels::createMtCmaChannel(2);
    if (!context_->isViable()) GTEST_SKIP() << "rpcjob_cma is not viable here";
    peer_ = std::make_unique<RawPeer>(*context_);
    ASSERT_TRUE(peer_->connected());
    inbox_ = std::make_unique<Inbox>(peer_->hostile);
    into_ = runtime::emptySharedHost({kBytes}, at::TensorOptions().dtype(at::kByte)).zero_();
    source_ = pattern(kBytes);
  }
  void TearDown() override {
    if (peer_) peer_->close();
    if (context_) context_->join();
  }

  void write(const runtime::channels::MtCmaWire& m) {
    auto copy = std::make_shared<runtime::channels::MtCmaWire>(m);
    peer_->hostile->write(copy.get(), sizeof(*copy), [copy](const tensorpipe::Error&) {});
  }
  // The raw peer's send of source_, its bytes private.
  runtime::channels::MtCmaWire privateSend() const {
    runtime::channels::MtCmaWire m;
    m.kind = runtime::channels::CopyKind::kSend;
    m.seq = 1;
    m.pid = ::getpid();
    m.address = reinterpret_cast<uintptr_t>(source_.data_ptr());
    m.length = kBytes;
    return m;
  }
  // The channel receives into into_: the outcome's future ("" success).
  std::future<std::string> receive() {
    auto done = std::make_shared<std::promise<std::string>>();
    peer_->channel->recv(
        tensorpipe::CpuBuffer{into_.data_ptr()}, kBytes,
        [done](const tensorpipe::Error& e) { done->set_value(e ? e.what() : ""); });
    return done->get_future();
  }
  // The push request the channel sends for privateSend(), checked.
  runtime::channels::MtCmaWire expectPushRequest() {
    auto ask = inbox_->take();
    EXPECT_TRUE(ask.has_value()) << "no push request";
    if (!ask) return {};
    const auto& arena = runtime::host_memory::SharedArena::instance();
    auto span = arena.find(into_.data_ptr(), kBytes);
    EXPECT_TRUE(span.has_value());
    EXPECT_EQ(ask->kind, runtime::channels::CopyKind::kPushRequest);
    EXPECT_EQ(ask->seq, 1u);
    EXPECT_EQ(ask->pid, ::getpid());
    EXPECT_EQ(ask->length, static_cast<uint64_t>(kBytes));
    EXPECT_EQ(ask->token, arena.token());
    if (span) {
      EXPECT_EQ(ask->regionFd, span->fd);
      EXPECT_EQ(ask->regionId, span->id);
      EXPECT_EQ(ask->regionOffset, span->offset);
    }
    return *ask;
  }
  runtime::channels::MtCmaWire answer(uint32_t status) const {
    runtime::channels::MtCmaWire m;
    m.kind = runtime::channels::CopyKind::kPushed;
    m.seq = 1;
    m.status = status;
    return m;
  }
  bool arrivedExact() const { return at::equal(into_, source_); }

  std::shared_ptr<tensorpipe::channel::Context> context_;
  std::unique_ptr<RawPeer> peer_;
  std::unique_ptr<Inbox> inbox_;
  at::Tensor into_, source_;
};

TEST_F(MtCmaPush, APushedAnswerCompletesTheReceiveWithoutAnAck) {
  const auto before = runtime::channels::mtCmaCounters();
  auto outcome = receive();
  write(privateSend());
  expectPushRequest();
  // What the sender does through its writable mapping of our region.
  std::memcpy(into_.data_ptr(), source_.data_ptr(), kBytes);
  write(answer(0));
  ASSERT_EQ(outcome.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(outcome.get(), "");
  EXPECT_TRUE(arrivedExact());
  const auto after = runtime::channels::mtCmaCounters();
  EXPECT_EQ(after.pushedReads, before.pushedReads + 1);
  EXPECT_EQ(after.pushedBytes, before.pushedBytes + kBytes);
  EXPECT_EQ(after.cmaReads, before.cmaReads);
  EXPECT_FALSE(inbox_->take(std::chrono::milliseconds(200)).has_value())
      << "a pushed transfer needs no ack";
}

TEST_F(MtCmaPush, ARefusedPushIsPulledAndAcked) {
  const auto before = runtime::channels::mtCmaCounters();
  auto outcome = receive();
  write(privateSend());
  expectPushRequest();
  write(answer(2));
  auto ack = inbox_->take();
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->kind, runtime::channels::CopyKind::kAck);
  EXPECT_EQ(ack->status, 0u);
  ASSERT_EQ(outcome.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(outcome.get(), "");
  EXPECT_TRUE(arrivedExact());
  const auto after = runtime::channels::mtCmaCounters();
  EXPECT_EQ(after.pushesRefused, before.pushesRefused + 1);
  EXPECT_EQ(after.cmaReads, before.cmaReads + 1);
  EXPECT_EQ(after.pushedReads, before.pushedReads);
}

TEST_F(MtCmaPush, AFailedPushFailsTheReceiveWithTheReason) {
  auto outcome = receive();
  write(privateSend());
  expectPushRequest();
  write(answer(1));
  ASSERT_EQ(outcome.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const std::string error = outcome.get();
  EXPECT_NE(error.find("rpcjob_cma: the sender could not write the data"), std::string::npos)
      << error;
}

// The sender may still be writing when a parked receive fails: its region must
// never come back from the arena's cache under another tensor.
TEST_F(MtCmaPush, AReceiveThatFailsWhileParkedRetiresItsRegion) {
  auto& arena = runtime::host_memory::SharedArena::instance();
  auto outcome = receive();
  write(privateSend());
  expectPushRequest();
  peer_->hostile->close();  // the sender is gone before it answered
  ASSERT_EQ(outcome.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(outcome.get(), "");
  const size_t regions = arena.mappedRegions();
  const size_t cached = arena.cachedBytes();
  into_ = at::Tensor();  // the pipe lets the buffer go
  EXPECT_EQ(arena.mappedRegions(), regions - 1) << "the region was not unmapped";
  EXPECT_EQ(arena.cachedBytes(), cached) << "the region went back to the cache";
}

// The channel sends; the raw peer, as a receiver, names a region the sender
// cannot map: the sender refuses, keeps its send, and completes it on the ack
// of the receiver's own read.
TEST_F(MtCmaPush, ASenderRefusesARegionItCannotMapAndWaitsForTheAck) {
  std::promise<std::string> sent;
  peer_->channel->send(tensorpipe::CpuBuffer{source_.data_ptr()}, kBytes,
                       [&](const tensorpipe::Error& e) { sent.set_value(e ? e.what() : ""); });
  auto send = inbox_->take();
  ASSERT_TRUE(send.has_value());
  ASSERT_EQ(send->kind, runtime::channels::CopyKind::kSend);
  runtime::channels::MtCmaWire ask;
  ask.kind = runtime::channels::CopyKind::kPushRequest;
  ask.seq = send->seq;
  ask.pid = -5;  // no such process
  ask.regionFd = 3;
  ask.length = kBytes;
  write(ask);
  auto refused = inbox_->take();
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->kind, runtime::channels::CopyKind::kPushed);
  EXPECT_EQ(refused->seq, send->seq);
  EXPECT_EQ(refused->status, 2u);
  auto done = sent.get_future();
  EXPECT_EQ(done.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "a refused push must leave the send pending: the receiver reads it now";
  runtime::channels::MtCmaWire ack;
  ack.kind = runtime::channels::CopyKind::kAck;
  ack.seq = send->seq;
  write(ack);
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(done.get(), "");
}

// RPCJOB_MTCMA_PUSH=0 in every process: private tensors travel by
// process_vm_readv again, exact.
TEST(MtCmaWithoutPush, PrivateTensorsAreReadWithProcessVmReadv) {
  ::setenv("RPCJOB_MTCMA_PUSH", "0", 1);
  auto cluster = std::make_unique<Cluster>(1);
  ::unsetenv("RPCJOB_MTCMA_PUSH");
  runtime::Runtime& rt = cluster->driver();
  at::Tensor sent = pattern((int64_t{8} << 20) + 5);
  Counted worker(rt, "w1"), driver(rt, "driver");
  at::Tensor back = rt.rpcSync("w1", "add", {sent, sent}).toTensor();
  EXPECT_TRUE(at::equal(back, sent.add(sent)));
  EXPECT_EQ(worker.delta(), reads(0, 2, 0));
  EXPECT_EQ(driver.delta(), reads(0, 1, 0));
  for (int code : cluster->shutdown()) EXPECT_EQ(code, 0);
}

// Last in this binary (suites run in the order they appear): it installs the
// allocator in this process for good.
TEST(SharedHostAllocatorCluster, TensorsOptedInProcessesMakeAreReadFromTheirArenas) {
  ::setenv("RPCJOB_SHARED_HOST_ALLOCATOR", "1", 1);  // w1 opts in from its environment
  runtime::RuntimeOptions options;
  options.sharedHostAllocator = true;  // the driver through its options
  auto cluster = std::make_unique<Cluster>(1, options);
  ::unsetenv("RPCJOB_SHARED_HOST_ALLOCATOR");
  runtime::Runtime& rt = cluster->driver();
  EXPECT_EQ(runtime::sharedHostAllocatorMinBytes(), runtime::kSharedHostAllocatorMinBytes);
  at::Tensor a = pattern((int64_t{6} << 20) + 3);  // made as any tensor is
  EXPECT_TRUE(runtime::isSharedHost(a));
  Counted worker(rt, "w1"), driver(rt, "driver");
  at::Tensor back = rt.rpcSync("w1", "add", {a, a}).toTensor();
  EXPECT_TRUE(at::equal(back, a.add(a)));
  EXPECT_EQ(worker.delta(), reads(2, 0, 0));  // our a, twice, mapped
  EXPECT_EQ(driver.delta(), reads(1, 0, 0));  // w1's sum, mapped
  for (int code : cluster->shutdown()) EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace rpcjob::testing
