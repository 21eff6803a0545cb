// Futures a user program needs (waitAll, collectAll, Promise), and async
// functions that block without stalling their worker's pipes.
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>

#include <thread>

#include "cluster.h"

namespace rpcjob::testing {
namespace {

using Clock = std::chrono::steady_clock;

TEST(FutureTest, WaitAllCollectAllAndPromise) {
  runtime::Promise a, b;
  runtime::Future all = runtime::collectAll({a.future(), b.future()});
  EXPECT_FALSE(all.isDone());
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(a.setValue(int64_t{1}));
    EXPECT_TRUE(b.setError(std::make_exception_ptr(std::runtime_error("b failed"))));
  });
  all.wait();
  completer.join();
  EXPECT_FALSE(all.hasError());
  EXPECT_FALSE(a.setValue(int64_t{2}));  // completed once
  EXPECT_EQ(a.future().value().toInt(), 1);
  EXPECT_THROW(runtime::waitAll({a.future(), b.future()}), std::runtime_error);
  runtime::Promise c;
  c.setValue(int64_t{3});
  auto values = runtime::waitAll({a.future(), c.future()});
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[1].toInt(), 3);
  EXPECT_TRUE(runtime::collectAll({}).isDone());
}

// An async function that blocks runs on the pool: the worker still reads and
// answers the next call on the same pipe meanwhile.
TEST(FutureTest, BlockingAsyncFunctionDoesNotStallThePipe) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  runtime::Future slow = rt.rpcAsync("w1", "async_block", {int64_t{1500}});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto start = Clock::now();
  EXPECT_EQ(rt.rpcSync("w1", "identity", {int64_t{1}}).toInt(), 1);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  EXPECT_LT(took.count(), 1000) << "the pipe waited for the async function";
  EXPECT_EQ(slow.value().toInt(), 1500);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace rpcjob::testing
