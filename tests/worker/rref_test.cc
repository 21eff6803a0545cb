// The RRef lifecycle across three processes: the owner keeps the value while any
// user (here: the driver, then w2 through a fork) holds it, and frees it after.
#include <ATen/core/ivalue.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <thread>

#include "cluster.h"

namespace rpcjob::testing {
namespace {

int64_t ownedOn(runtime::Runtime& rt, const std::string& worker) {
  return rt.rpcSync(worker, runtime::kBuiltinOwnerRRefCount, {}).toInt();
}

// Deletes are fire-and-forget messages; poll the owner's count with a deadline.
bool eventuallyOwned(runtime::Runtime& rt, const std::string& worker, int64_t expected) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    if (ownedOn(rt, worker) == expected) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(RRefTest, OwnerFreesTheValueOnceEveryUserIsGone) {
  Cluster cluster(2);
  runtime::Runtime& rt = cluster.driver();
  at::Tensor value = at::ones({4, 4});
  {
    runtime::RRef rref = rt.remote("w1", "identity", {value});
    EXPECT_EQ(rref.owner(), "w1");
    EXPECT_FALSE(rref.isOwner());
    rref.confirmed().value();
    EXPECT_TRUE(at::equal(rref.toHere().toTensor(), value));
    EXPECT_EQ(ownedOn(rt, "w1"), 1);
    EXPECT_THROW(rref.localValue(), runtime::RpcError);

    // Fork to a third worker, which keeps it.
    rt.rpcSync("w2", "hold", {rref.toIValue()});
    EXPECT_TRUE(at::equal(rt.rpcSync("w2", "fetch_held", {}).toTensor(), value));
  }
  // The driver's reference is gone; w2's fork keeps the value alive.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(ownedOn(rt, "w1"), 1);
  EXPECT_TRUE(at::equal(rt.rpcSync("w2", "fetch_held", {}).toTensor(), value));
  EXPECT_EQ(rt.rpcSync("w2", "release", {}).toInt(), 1);
  EXPECT_TRUE(eventuallyOwned(rt, "w1", 0));

  // An RRef whose function fails reports the error on confirmation and toHere.
  runtime::RRef failed = rt.remote("w1", "raise", {std::string("no value")});
  EXPECT_TRUE(failed.confirmed().hasError());
  EXPECT_THROW(failed.toHere(), runtime::RpcError);
  failed = runtime::RRef();

  // Forking an RRef that this worker owns... the driver owns nothing, so fork
  // one owned by w1 back to its owner: the owner sees its own value.
  runtime::RRef back = rt.remote("w1", "identity", {int64_t{9}});
  back.confirmed().value();
  rt.rpcSync("w1", "hold", {back.toIValue()});
  EXPECT_EQ(rt.rpcSync("w1", "fetch_held", {}).toInt(), 9);
  rt.rpcSync("w1", "release", {});
  back = runtime::RRef();
  EXPECT_TRUE(eventuallyOwned(rt, "w1", 0));
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// Bug: remote() to oneself made a user RRef (isOwner false): localValue()
// threw on the owner, and a fork of it was never released.
TEST(RRefTest, RemoteToSelfOwnsTheValue) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  {
    runtime::RRef self = rt.remote("driver", "identity", {int64_t{5}});
    EXPECT_EQ(self.owner(), "driver");
    EXPECT_TRUE(self.isOwner());
    EXPECT_EQ(self.localValue().toInt(), 5);
    EXPECT_EQ(self.toHere().toInt(), 5);
    rt.rpcSync("w1", "hold", {self.toIValue()});
    EXPECT_EQ(rt.rpcSync("w1", "fetch_held", {}).toInt(), 5);
    EXPECT_EQ(rt.rpcSync("w1", "release", {}).toInt(), 1);
  }
  EXPECT_TRUE(eventuallyOwned(rt, "driver", 0));
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// Bug: a fork registered by a third worker could reach the owner before the
// remote() call that creates the value (a large argument is still on its way),
// and the owner refused it instead of waiting, as PyTorch does.
TEST(RRefTest, ForkThatOvertakesTheCreatingCallWaitsForIt) {
  Cluster cluster(2);
  runtime::Runtime& rt = cluster.driver();
  at::Tensor big = at::arange(int64_t{16} << 20, at::kFloat);  // 64 MiB: slow to arrive
  for (int round = 0; round < 3; ++round) {
    runtime::RRef rref = rt.remote("w1", "identity", {big});
    // w2 registers its fork with w1 while w1 is still reading the call.
    rt.rpcSync("w2", "hold", {rref.toIValue()});
    EXPECT_TRUE(at::equal(rt.rpcSync("w2", "fetch_held", {}).toTensor(), big));
    EXPECT_EQ(rt.rpcSync("w2", "release", {}).toInt(), 1);
  }
  EXPECT_TRUE(eventuallyOwned(rt, "w1", 0));
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// Bug: an RRef passed to a function that never converted it back stayed
// registered (held by its parent for a child that never confirmed) forever.
TEST(RRefTest, RRefArgumentTheCalleeIgnoresIsReleased) {
  Cluster cluster(2);
  runtime::Runtime& rt = cluster.driver();
  {
    runtime::RRef rref = rt.remote("w1", "identity", {int64_t{3}});
    rref.confirmed().value();
    rt.rpcSync("w2", "ignore", {rref.toIValue()});  // a user forks to a third worker
    rt.rpcSync("w1", "ignore", {rref.toIValue()});  // a user forks back to the owner
  }
  EXPECT_TRUE(eventuallyOwned(rt, "w1", 0));
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// toHere(timeout) gives up on a value that takes longer; and an owner waits for
// a creating call only so long (here: the driver's default timeout).
TEST(RRefTest, TimeoutsOfToHereAndOfAnOwnerWaitingForItsValue) {
  runtime::RuntimeOptions options;
  options.defaultTimeout = std::chrono::milliseconds(800);
  Cluster cluster(1, options);
  runtime::Runtime& rt = cluster.driver();
  runtime::RRef slow = rt.remote("w1", "sleep_ms", {int64_t{600}});
  try {
    slow.toHere(std::chrono::milliseconds(100));
    ADD_FAILURE() << "toHere did not time out";
  } catch (const runtime::RpcError& e) {
    EXPECT_EQ(e.code(), runtime::ErrorCode::kTimeout) << e.what();
  }
  EXPECT_EQ(slow.toHere(std::chrono::milliseconds(5000)).toInt(), 600);

  // A fork, as w1 would send it, of an RRef w1 says it is creating on the
  // driver, whose creating call never comes.
  c10::IValue fork =
      c10::ivalue::Tuple::create({std::string("rpcjob.rref"), int64_t{0}, int64_t{1},
                                  int64_t{424242}, int64_t{1}, int64_t{5}, int64_t{0}});
  runtime::RRef never = rt.rrefFromIValue(fork);
  EXPECT_TRUE(never.isOwner());
  EXPECT_EQ(ownedOn(rt, "driver"), 1);  // waiting for the value
  auto start = std::chrono::steady_clock::now();
  try {
    never.localValue();
    ADD_FAILURE() << "a value that never comes was waited for forever";
  } catch (const runtime::RpcError& e) {
    EXPECT_NE(std::string(e.what()).find("did not arrive"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(ownedOn(rt, "driver"), 0);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// Bug: a message that could not be sent (a value beside the RRef cannot be
// serialized) left the RRefs in it forked for a receiver that never got them.
TEST(RRefTest, RRefsInAMessageThatIsNotSentAreNotForked) {
  Cluster cluster(2);
  runtime::Runtime& rt = cluster.driver();
  at::Tensor sparse = at::ones({2}).to_sparse();
  {
    runtime::RRef mine = rt.makeRRef(int64_t{1});                      // owner forks
    runtime::RRef theirs = rt.remote("w1", "identity", {int64_t{2}});  // user forks
    theirs.confirmed().value();
    EXPECT_THROW(rt.rpcSync("w2", "identity", {mine.toIValue(), theirs.toIValue(), sparse}),
                 runtime::RpcError);
    EXPECT_THROW(rt.remote("w2", "identity", {mine.toIValue(), sparse}).confirmed().value(),
                 runtime::RpcError);
    // A result that cannot be sent back, beside an RRef its callee owns.
    EXPECT_THROW(rt.rpcSync("w1", "unsendable_with_rref", {}), runtime::RpcError);
  }
  EXPECT_TRUE(eventuallyOwned(rt, "driver", 0));
  EXPECT_TRUE(eventuallyOwned(rt, "w1", 0));
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace rpcjob::testing
