// Remote objects and RRefs as values across real worker processes: the
// pipeline tutorial's pattern, fork chains, concurrent method calls, bad
// input, and an owner that dies under pending proxy calls.
#include <ATen/core/ivalue.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include <thread>

#include "cluster.h"
#include "rpcjob/runtime/remote_object.h"
#include "test_functions.h"

namespace rpcjob::testing {
namespace {

using runtime::RRef;
using Clock = std::chrono::steady_clock;

int64_t ownedOn(runtime::Runtime& rt, const std::string& worker) {
  return rt.rpcSync(worker, runtime::kBuiltinOwnerRRefCount, {}).toInt();
}

// Deletes are fire-and-forget messages; poll the owner's count with a deadline.
bool eventuallyOwned(runtime::Runtime& rt, const std::string& worker, int64_t expected) {
  auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    if (ownedOn(rt, worker) == expected) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string errorOf(const runtime::Future& f) {
  return f.hasError() ? f.errorMessage() : "";
}

// The pipeline tutorial: the driver makes local RRefs of micro-batches; stage
// 1's remote().forward gives RRefs that stage 2's rpcAsync().forward consumes,
// every chain in flight at once.
TEST(RemoteObjectTest, TutorialPipelineAcrossThreeWorkers) {
  Cluster cluster(2);
  runtime::Runtime& rt = cluster.driver();
  at::Tensor batch = at::randn({32, 4});
  {
    RRef p1 = rt.remote("w1", "Stage1", {int64_t{4}, int64_t{8}});
    RRef p2 = rt.remote("w2", "Stage2", {int64_t{8}, int64_t{2}});
    std::vector<runtime::Future> outputs;
    for (const at::Tensor& x : batch.split(4)) {
      RRef xRRef = rt.makeRRef(x);
      EXPECT_TRUE(xRRef.isOwner());
      RRef yRRef = p1.remote("forward", {xRRef.toIValue()});
      EXPECT_EQ(yRRef.owner(), "w1");
      outputs.push_back(p2.rpcAsync("forward", {yRRef.toIValue()}));
    }
    ASSERT_EQ(outputs.size(), 8u);
    std::vector<at::Tensor> parts;
    for (const auto& v : runtime::waitAll(outputs)) parts.push_back(v.toTensor());
    EXPECT_TRUE(at::allclose(at::cat(parts), pipelineReference(batch)));

    // The stages' parameters, as RRefs owned where each stage lives.
    auto params = p1.rpcSync(runtime::kParameterRRefsMethod).toListRef().vec();
    ASSERT_EQ(params.size(), 2u);  // weight, bias
    for (const auto& p : params) EXPECT_EQ(RRef::fromIValue(p).owner(), "w1");
    EXPECT_EQ(RRef::fromIValue(params[0]).toHere().toTensor().sizes(), at::IntArrayRef({8, 4}));
  }
  for (const char* owner : {"driver", "w1", "w2"}) {
    EXPECT_TRUE(eventuallyOwned(rt, owner, 0)) << owner << " still owns RRefs";
  }
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// Created on B by A, passed A -> C -> D, fetched on D, then dropped everywhere.
TEST(RemoteObjectTest, ForkChainIsReleasedEverywhere) {
  Cluster cluster(3);
  runtime::Runtime& rt = cluster.driver();
  at::Tensor value = at::arange(12).reshape({3, 4});
  {
    RRef rref = rt.remote("w1", "identity", {value});
    EXPECT_TRUE(at::equal(
        rt.rpcSync("w2", "pass_on", {std::string("w3"), rref.toIValue()}).toTensor(), value));
    EXPECT_EQ(ownedOn(rt, "w1"), 1);
  }
  EXPECT_TRUE(eventuallyOwned(rt, "w1", 0));
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// RRefs anywhere in arguments and results, local ones included.
TEST(RemoteObjectTest, RRefsInsideValuesTravelBothWays) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  {
    RRef a = rt.makeRRef(at::ones({2}));
    RRef b = rt.remote("w1", "identity", {at::full({2}, 2.0)});
    c10::impl::GenericList list(c10::AnyType::get());
    list.push_back(a.toIValue());
    list.push_back(b.toIValue());
    EXPECT_TRUE(at::equal(rt.rpcSync("w1", "sum_rrefs", {list}).toTensor(), at::full({2}, 3.0)));

    // Echoed back inside a tuple and a dict: the driver finds its own RRef.
    c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
    dict.insert("a", a.toIValue());
    c10::IValue nested = c10::ivalue::Tuple::create({dict, b.toIValue(), int64_t{7}});
    auto back = rt.rpcSync("w1", "identity", {nested}).toTupleRef().elements().vec();
    RRef a2 = RRef::fromIValue(back.at(0).toGenericDict().at("a"));
    EXPECT_TRUE(a2.isOwner());
    EXPECT_EQ(a2.id(), a.id());
    EXPECT_TRUE(at::equal(a2.localValue().toTensor(), at::ones({2})));
    RRef b2 = RRef::fromIValue(back.at(1));
    EXPECT_EQ(b2.owner(), "w1");
    EXPECT_TRUE(
        at::equal(b2.toHere(std::chrono::milliseconds(5000)).toTensor(), at::full({2}, 2.0)));
    EXPECT_EQ(back.at(2).toInt(), 7);
  }
  EXPECT_TRUE(eventuallyOwned(rt, "driver", 0));
  EXPECT_TRUE(eventuallyOwned(rt, "w1", 0));
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// Without serializeCalls the calls on one object overlap; with it, never.
TEST(RemoteObjectTest, ConcurrentMethodCallsWithAndWithoutSerializing) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  for (const char* cls : {"Counter", "SerialCounter"}) {
    RRef counter = rt.remote("w1", cls, {int64_t{0}});
    std::vector<runtime::Future> calls;
    for (int i = 0; i < 8; ++i) calls.push_back(counter.rpcAsync("enter", {int64_t{50}}));
    runtime::collectAll(calls).wait();
    for (auto& c : calls) EXPECT_EQ(errorOf(c), "");
    EXPECT_EQ(counter.rpcSync("value").toInt(), 8);
    int64_t overlap = counter.rpcSync("max_active").toInt();
    if (std::string(cls) == "Counter") {
      EXPECT_GT(overlap, 1) << "calls on one object ran one at a time";
    } else {
      EXPECT_EQ(overlap, 1) << "serializeCalls let calls overlap";
    }
  }
  // An object owned here: its calls run locally, on the pool.
  RRef local = rt.remote("driver", "Counter", {int64_t{5}});
  EXPECT_TRUE(local.isOwner());
  EXPECT_EQ(local.rpcSync("add", {int64_t{2}}).toInt(), 7);
  EXPECT_EQ(local.remote("value").localValue().toInt(), 7);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// Each mistake is an RpcError naming it on the caller; the owner keeps serving.
TEST(RemoteObjectTest, BadInputIsAClearErrorAndTheOwnerKeepsServing) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  auto expectError = [&](const runtime::Future& f, const std::string& needle) {
    ASSERT_TRUE(f.waitFor(std::chrono::seconds(10))) << needle;
    EXPECT_NE(errorOf(f).find(needle), std::string::npos) << errorOf(f);
    EXPECT_EQ(rt.rpcSync("w1", "identity", {int64_t{1}}).toInt(), 1);
  };
  expectError(rt.remote("w1", "NoSuchClass", {}).confirmed(), "'NoSuchClass'");
  expectError(rt.remote("w1", "Counter", {std::string("not an int")}).confirmed(),
              "constructing 'Counter'");
  RRef counter = rt.remote("w1", "Counter", {int64_t{0}});
  expectError(counter.rpcAsync("no_such_method"), "no method 'no_such_method'");
  expectError(counter.rpcAsync("add", {std::string("x")}), "Counter.add");
  expectError(counter.rpcAsync("raise"), "counter says no");
  expectError(counter.rpcAsync("add"), "Counter.add");  // too few arguments
  // A method on an RRef to a plain value, an object fetched by value.
  RRef plain = rt.remote("w1", "identity", {int64_t{3}});
  expectError(plain.rpcAsync("add", {int64_t{1}}), "not to a remote object");
  expectError(counter.toHereAsync(), "cannot serialize");
  // An RRef id the owner never made.
  expectError(rt.rpcAsync("w1", runtime::kBuiltinMethod,
                          {int64_t{1}, int64_t{999999}, std::string("value")}),
              "no RRef 1:999999");
  expectError(rt.rpcAsync("w1", runtime::kBuiltinMethod, {std::string("junk")}), "malformed");
  EXPECT_EQ(counter.rpcSync("add", {int64_t{4}}).toInt(), 4);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

TEST(RemoteObjectTest, OwnerKilledFailsPendingProxyCallsNamingIt) {
  Cluster cluster(1);
  runtime::Runtime& rt = cluster.driver();
  RRef counter = rt.remote("w1", "Counter", {int64_t{0}});
  counter.confirmed().value();
  runtime::CallOptions options;
  options.timeout = std::chrono::seconds(10);
  std::vector<runtime::Future> pending;
  for (int i = 0; i < 3; ++i)
    pending.push_back(counter.rpcAsync("enter", {int64_t{20000}}, options));
  RRef later = counter.remote("enter", {int64_t{20000}}, options);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  cluster.kill(1);
  pending.push_back(later.confirmed());
  for (auto& f : pending) {
    ASSERT_TRUE(f.waitFor(std::chrono::seconds(10))) << "a proxy call to a dead owner hangs";
    try {
      std::rethrow_exception(f.error());
    } catch (const runtime::RpcError& e) {
      EXPECT_EQ(e.worker(), "w1") << e.what();
      EXPECT_NE(std::string(e.what()).find("w1"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(counter.rpcSync("value", {}, options), runtime::RpcError);
}

}  // namespace
}  // namespace rpcjob::testing
