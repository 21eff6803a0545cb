// CallBatch (rpcjob/runtime/call_batch.h) between real processes: requests are
// held until a flush, a wait, the per-peer limit or the batch's end; each call's
// value comes back exact; an error in a batch fails only its call.
#include <ATen/core/ivalue.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "cluster.h"
#include "rpcjob/runtime/call_batch.h"

namespace rpcjob::testing {
namespace {

using runtime::CallBatch;
using runtime::ErrorCode;
using runtime::RpcError;

class CallBatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster(2); }
  static void TearDownTestSuite() {
    for (int code : cluster_->shutdown()) EXPECT_EQ(code, 0) << "a worker did not exit cleanly";
    delete cluster_;
  }
  static runtime::Runtime& rt() { return cluster_->driver(); }
  // The counter's value read by another thread, whose calls are never held.
  static int64_t valueFromElsewhere(runtime::RRef& counter) {
    return std::async(std::launch::async, [&] { return counter.rpcSync("value").toInt(); }).get();
  }
  static Cluster* cluster_;
};
Cluster* CallBatchTest::cluster_ = nullptr;

TEST_F(CallBatchTest, RequestsAreHeldUntilFlushThenAllRun) {
  // Counter's methods run on the callee's pool, several at once: the order in
  // which the adds apply is not observable, their sum is.
  runtime::RRef counter = rt().remote("w1", "Counter", {int64_t{0}});
  counter.confirmed().value();
  std::vector<runtime::Future> adds;
  {
    CallBatch batch(rt());
    for (int64_t i = 1; i <= 10; ++i) adds.push_back(counter.rpcAsync("add", {i}));
    // Nothing was written: a call from another thread, on the same pipe, sees none.
    EXPECT_EQ(valueFromElsewhere(counter), 0);
    for (auto& f : adds) EXPECT_FALSE(f.isDone());
    batch.flush();
    for (auto& f : adds) {
      const int64_t after = f.value().toInt();  // the counter just after this add
      EXPECT_GE(after, 1);
      EXPECT_LE(after, 55);
    }
    EXPECT_EQ(valueFromElsewhere(counter), 55);
    // The batch stays open after a flush.
    adds.push_back(counter.rpcAsync("add", {int64_t{100}}));
    EXPECT_EQ(valueFromElsewhere(counter), 55);
  }  // its end writes the rest
  EXPECT_EQ(adds.back().value().toInt(), 155);
}

TEST_F(CallBatchTest, WaitingOnAHeldCallWritesIt) {
  CallBatch batch(rt());
  runtime::Future f = rt().rpcAsync("w1", "identity", {int64_t{7}});
  EXPECT_EQ(f.value().toInt(), 7);  // no deadlock on its own held request
  EXPECT_EQ(rt().rpcSync("w2", "identity", {int64_t{5}}).toInt(), 5);  // rpcSync: a wait
  runtime::Future g = rt().rpcAsync("w2", "identity", {int64_t{8}});
  EXPECT_TRUE(g.waitFor(std::chrono::seconds(30)));
  EXPECT_EQ(g.value().toInt(), 8);
}

TEST_F(CallBatchTest, ManyCallsToTwoPeersComeBackExact) {
  // Past the per-peer limit of held requests (256), with tensors among them
  // (those travel alone, between the batches).
  std::vector<runtime::Future> futures;
  std::vector<at::Tensor> tensors;
  {
    CallBatch batch(rt());
    for (int64_t i = 0; i < 1000; ++i) {
      const char* peer = i % 2 ? "w2" : "w1";
      if (i % 97 == 0) {
        tensors.push_back(at::arange(i + 1));
        futures.push_back(rt().rpcAsync(peer, "identity", {tensors.back()}));
      } else {
        futures.push_back(rt().rpcAsync(peer, "identity", {i}));
      }
    }
  }
  size_t t = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    if (i % 97 == 0) {
      EXPECT_TRUE(at::equal(futures[i].value().toTensor(), tensors[t++])) << i;
    } else {
      EXPECT_EQ(futures[i].value().toInt(), i);
    }
  }
}

TEST_F(CallBatchTest, AnErrorInABatchFailsOnlyItsCall) {
  std::vector<runtime::Future> futures;
  {
    CallBatch batch(rt());
    futures.push_back(rt().rpcAsync("w1", "identity", {int64_t{1}}));
    futures.push_back(rt().rpcAsync("w1", "no_such_function", {}));
    futures.push_back(rt().rpcAsync("w1", "raise", {std::string("boom")}));
    futures.push_back(rt().rpcAsync("w1", "identity", {int64_t{4}}));
  }
  EXPECT_EQ(futures[0].value().toInt(), 1);
  try {
    futures[1].value();
    ADD_FAILURE() << "an unknown function succeeded";
  } catch (const RpcError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_function"), std::string::npos) << e.what();
  }
  try {
    futures[2].value();
    ADD_FAILURE() << "raise did not";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteException) << e.what();
  }
  EXPECT_EQ(futures[3].value().toInt(), 4);
}

TEST_F(CallBatchTest, ANestedBatchAddsNothingAndTheOuterOneHolds) {
  runtime::RRef counter = rt().remote("w2", "Counter", {int64_t{0}});
  counter.confirmed().value();
  CallBatch outer(rt());
  std::vector<runtime::Future> f;
  {
    CallBatch inner(rt());
    f.push_back(counter.rpcAsync("add", {int64_t{3}}));
  }  // the inner one's end writes nothing
  EXPECT_EQ(valueFromElsewhere(counter), 0);
  outer.flush();
  EXPECT_EQ(f.at(0).value().toInt(), 3);
}

}  // namespace
}  // namespace rpcjob::testing
