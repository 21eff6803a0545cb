// The shared-memory lane (worker/src/lane/) between real worker processes:
// it carries small calls, keeps each pipe's order across lane and pipe, fails
// calls when the peer dies, and leaves nothing behind.
#include <dirent.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "cluster.h"
#include "lane/lane.h"
#include "rpcjob/runtime/call_batch.h"
#include "rpcjob/runtime/runtime.h"

namespace rpcjob::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Counters {
  int64_t up, declined, failed, sent, received;
};
Counters remoteCounters(runtime::Runtime& rt, const std::string& to) {
  const auto t = rt.rpcSync(to, "lane_counters", {}).toTupleRef().elements();
  return {t.at(0).toInt(), t.at(1).toInt(), t.at(2).toInt(), t.at(3).toInt(), t.at(4).toInt()};
}

size_t entries(const char* dir) {
  size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

TEST(LaneTest, CarriesSmallCallsWithTheSameResults) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  ASSERT_EQ(rt.rpcSync("w1", "identity", {int64_t{0}}).toInt(), 0);  // the lane is up after this
  const auto before = runtime::lane::laneCounters();
  const Counters remoteBefore = remoteCounters(rt, "w1");
  const at::Tensor small = at::arange(100, at::kFloat);
  const at::Tensor large = at::arange(1 << 20, at::kFloat);  // 4 MiB: by channel
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(rt.rpcSync("w1", "identity", {int64_t{i}}).toInt(), i);
    EXPECT_EQ(rt.rpcSync("w1", "identity", {std::string(i * 10, 'x')}).toStringRef(),
              std::string(i * 10, 'x'));
    EXPECT_TRUE(rt.rpcSync("w1", "identity", {small}).toTensor().equal(small));
  }
  EXPECT_TRUE(rt.rpcSync("w1", "identity", {large}).toTensor().equal(large));
  const auto after = runtime::lane::laneCounters();
  const Counters remoteAfter = remoteCounters(rt, "w1");
  EXPECT_GE(after.lanesUp, 1u);
  EXPECT_GE(after.framesSent - before.framesSent, 600u);          // our requests
  EXPECT_GE(after.framesReceived - before.framesReceived, 600u);  // their answers
  EXPECT_GE(remoteAfter.received - remoteBefore.received, 600);
  EXPECT_EQ(remoteAfter.failed, 0);
  // An error travels the lane too.
  auto failed = rt.rpcAsync("w1", "raise_inline", {std::string("lane")});
  EXPECT_TRUE(failed.hasError() || (failed.wait(), failed.hasError()));
}

// A burst of calls to an inline function: the server's poller answers several
// in a turn and publishes them together (held frames, lane.h); a CallBatch's
// requests are published together too. Every answer arrives, with its value,
// and each frame is counted once on both sides.
TEST(LaneTest, HeldFramesAllArriveAndAreCountedOnce) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  ASSERT_EQ(rt.rpcSync("w1", runtime::kBuiltinEcho, {int64_t{0}}).toInt(), 0);  // the lane is up
  const auto before = runtime::lane::laneCounters();
  const Counters remoteBefore = remoteCounters(rt, "w1");
  constexpr int kBurst = 5000, kBatch = 1000;
  std::vector<runtime::Future> futures;
  for (int i = 0; i < kBurst; ++i) {
    futures.push_back(rt.rpcAsync("w1", runtime::kBuiltinEcho, {int64_t{i}}));
  }
  {
    runtime::CallBatch batch(rt);
    for (int i = 0; i < kBatch; ++i) {
      futures.push_back(rt.rpcAsync("w1", runtime::kBuiltinEcho, {int64_t{kBurst + i}}));
    }
  }
  for (int i = 0; i < kBurst + kBatch; ++i) ASSERT_EQ(futures[i].value().toInt(), i);
  const Counters remoteAfter = remoteCounters(rt, "w1");
  const auto after = runtime::lane::laneCounters();
  constexpr int kCalls = kBurst + kBatch;
  // Beside the calls: the counters' own calls, one or two frames each way.
  EXPECT_GE(after.framesSent - before.framesSent, uint64_t{kCalls});
  EXPECT_LE(after.framesSent - before.framesSent, uint64_t{kCalls + 2});
  EXPECT_GE(after.framesReceived - before.framesReceived, uint64_t{kCalls});
  EXPECT_LE(after.framesReceived - before.framesReceived, uint64_t{kCalls + 2});
  EXPECT_GE(remoteAfter.sent - remoteBefore.sent, kCalls);
  EXPECT_LE(remoteAfter.sent - remoteBefore.sent, kCalls + 2);
  EXPECT_GE(remoteAfter.received - remoteBefore.received, kCalls);
  EXPECT_LE(remoteAfter.received - remoteBefore.received, kCalls + 2);
  EXPECT_EQ(remoteAfter.failed, 0);
}

TEST(LaneTest, LargeAndSmallMessagesArriveInOrder) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  ASSERT_EQ(rt.rpcSync("w1", "identity", {int64_t{0}}).toInt(), 0);
  rt.rpcSync("w1", "arrivals", {});
  const at::Tensor big = at::ones({40000}, at::kFloat);  // 160 KB: the pipe, by channel
  const std::string mid(40000, 'm');                     // over the inline limit: the pipe
  std::vector<runtime::Future> calls;
  for (int64_t i = 0; i < 600; ++i) {
    std::vector<c10::IValue> args{i};
    if (i % 7 == 3) args.push_back(big);
    if (i % 11 == 5) args.push_back(mid);
    calls.push_back(rt.rpcAsync("w1", "record", std::move(args)));
  }
  runtime::waitAll(calls);
  auto got = rt.rpcSync("w1", "arrivals", {}).toIntVector();
  ASSERT_EQ(got.size(), 600u);
  for (int64_t i = 0; i < 600; ++i) ASSERT_EQ(got[i], i) << "out of order at " << i;
  EXPECT_GT(runtime::lane::laneCounters().framesSent, 500u);
}

// While the peer's reader sleeps, small calls fill the lane's ring (1 MiB):
// the ones that do not fit go on the pipe, and all arrive in the order sent.
TEST(LaneTest, CallsThatFindTheRingFullTakeThePipeInOrder) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  ASSERT_EQ(rt.rpcSync("w1", "identity", {int64_t{0}}).toInt(), 0);  // the lane is up
  rt.rpcSync("w1", "arrivals", {});
  const auto before = runtime::lane::laneCounters();
  constexpr int64_t kCalls = 300;
  const std::string filler(20000, 'f');  // inline, so lane-sized: 50 fill the ring
  std::vector<runtime::Future> calls;
  calls.push_back(rt.rpcAsync("w1", "record_then_sleep", {int64_t{0}, int64_t{500}}));
  for (int64_t i = 1; i < kCalls; ++i) calls.push_back(rt.rpcAsync("w1", "record", {i, filler}));
  runtime::waitAll(calls);
  for (auto& c : calls) ASSERT_FALSE(c.hasError()) << c.errorMessage();
  const auto sent = runtime::lane::laneCounters().framesSent - before.framesSent;
  EXPECT_LT(sent, static_cast<uint64_t>(kCalls)) << "the ring never filled";
  EXPECT_GT(sent, 10u);
  auto got = rt.rpcSync("w1", "arrivals", {}).toIntVector();
  ASSERT_EQ(got.size(), static_cast<size_t>(kCalls));
  for (int64_t i = 0; i < kCalls; ++i) ASSERT_EQ(got[i], i) << "out of order at " << i;
}

// A CallBatch holds small calls as lane frames and the others as messages for
// the pipe, and writes both at its flushes (each 256, at a wait, at its end):
// they still arrive in the order made.
TEST(LaneTest, ABatchKeepsItsCallsInOrderAcrossLaneAndPipe) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  ASSERT_EQ(rt.rpcSync("w1", "identity", {int64_t{0}}).toInt(), 0);  // the lane is up
  rt.rpcSync("w1", "arrivals", {});
  const auto before = runtime::lane::laneCounters();
  const at::Tensor big = at::ones({40000}, at::kFloat);  // the pipe, by channel
  constexpr int64_t kCalls = 1000;
  std::vector<runtime::Future> calls;
  {
    runtime::CallBatch batch(rt);
    for (int64_t i = 0; i < kCalls; ++i) {
      std::vector<c10::IValue> args{i};
      if (i % 97 == 5 || (i >= 600 && i < 603)) args.push_back(big);
      calls.push_back(rt.rpcAsync("w1", "record", std::move(args)));
      if (i == 700) {
        EXPECT_FALSE(calls[650].isDone());  // held: isDone() is not a wait
      }
    }
  }
  runtime::waitAll(calls);
  for (auto& c : calls) ASSERT_FALSE(c.hasError()) << c.errorMessage();
  auto got = rt.rpcSync("w1", "arrivals", {}).toIntVector();
  ASSERT_EQ(got.size(), static_cast<size_t>(kCalls));
  for (int64_t i = 0; i < kCalls; ++i) ASSERT_EQ(got[i], i) << "out of order at " << i;
  EXPECT_GT(runtime::lane::laneCounters().framesSent - before.framesSent, 900u);
}

TEST(LaneTest, AKilledPeerFailsTheLanesCallsInTime) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  ASSERT_EQ(rt.rpcSync("w1", "identity", {int64_t{0}}).toInt(), 0);
  std::vector<runtime::Future> calls;
  const auto start = Clock::now();
  for (int i = 0; i < 2000; ++i) {
    calls.push_back(rt.rpcAsync("w1", i % 2 ? "identity" : "sleep_ms", {int64_t{i % 2 ? i : 1}},
                                runtime::CallOptions{std::chrono::seconds(10)}));
    if (i == 1000) cluster.kill(1);
  }
  int failed = 0;
  for (auto& f : calls) {
    f.wait();
    failed += f.hasError();
  }
  EXPECT_GT(failed, 0);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(9));  // by the pipe's failure, not timeouts
}

TEST(LaneTest, OffBehavesAsBefore) {
  runtime::RuntimeOptions off;
  off.sharedMemoryLane = false;
  const auto before = runtime::lane::laneCounters();
  Cluster cluster(1, off);
  runtime::Runtime& rt = cluster.driver();
  for (int i = 0; i < 50; ++i) EXPECT_EQ(rt.rpcSync("w1", "identity", {int64_t{i}}).toInt(), i);
  const auto after = runtime::lane::laneCounters();
  EXPECT_EQ(after.framesSent, before.framesSent);
  EXPECT_EQ(after.framesReceived, before.framesReceived);
  // w1 takes lanes, but we never offered one: it received nothing on one.
  EXPECT_EQ(remoteCounters(rt, "w1").received, 0);
}

TEST(LaneTest, NoDescriptorsOrThreadsLeftAfterShutdown) {
  auto session = [] {
    Cluster cluster(1);
    runtime::Runtime& rt = cluster.driver();
    for (int i = 0; i < 20; ++i) rt.rpcSync("w1", "identity", {int64_t{i}});
    cluster.shutdown();
  };
  session();  // what a first runtime leaves for the process's lifetime (pools, arenas)
  const size_t fds = entries("/proc/self/fd");
  const size_t threads = entries("/proc/self/task");
  const uint64_t sent = runtime::lane::laneCounters().framesSent;
  session();
  EXPECT_GE(runtime::lane::laneCounters().framesSent, sent + 20);  // it had a lane
  EXPECT_EQ(entries("/proc/self/fd"), fds);        // the lane's memfd and bell, the pipes
  EXPECT_EQ(entries("/proc/self/task"), threads);  // the poller
}

}  // namespace
}  // namespace rpcjob::testing
