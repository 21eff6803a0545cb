// Distributed autograd and DistributedOptimizer across real worker processes:
// gradients and trained weights equal those of the same model run in this one
// process; failures during backward reach the driver; no context outlives its
// scope on any worker.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <atomic>
#include <thread>

#include "autograd/container.h"
#include "autograd/gradient_wire.h"
#include "autograd/tensor_walk.h"
#include "autograd_functions.h"
#include "cluster.h"
#include "rpcjob/runtime/dist_autograd.h"
#include "rpcjob/runtime/dist_optimizer.h"
#include "runtime_impl.h"

namespace rpcjob::testing {
namespace {

namespace dist = runtime::dist_autograd;
using Tuple = c10::ivalue::Tuple;

struct Linear {
  at::Tensor w, b;
};

// The same linear on `worker` (by name) and here (the reference copy).
Linear makeLinear(runtime::Runtime& rt, const std::string& worker, const std::string& name,
                  int64_t in, int64_t out, int64_t seed) {
  rt.rpcSync(worker, "ag.make_linear", {name, in, out, seed});
  auto [w, b] = linearParams(in, out, seed);
  return {w, b};
}

std::vector<at::Tensor> localGrads(const at::Tensor& loss, const std::vector<Linear>& layers) {
  std::vector<at::Tensor> inputs;
  for (const auto& l : layers) {
    inputs.push_back(l.w);
    inputs.push_back(l.b);
  }
  return torch::autograd::grad({loss}, inputs);
}

// The gradients of linear `name` on `worker` in context `id`.
std::pair<at::Tensor, at::Tensor> remoteGrads(runtime::Runtime& rt, const std::string& worker,
                                              const std::string& name, dist::ContextId id) {
  auto t = rt.rpcSync(worker, "ag.gradients", {id, name}).toTuple();
  auto get = [](const c10::IValue& v) { return v.isNone() ? at::Tensor() : v.toTensor(); };
  return {get(t->elements()[0]), get(t->elements()[1])};
}

void expectClose(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what << ": no gradient";
  EXPECT_TRUE(at::allclose(actual, expected, 1e-5, 1e-6)) << what << "\n"
                                                          << actual << "\nvs\n"
                                                          << expected;
}

// Releases are answered before the scope ends, so none may be left at all.
void expectNoContexts(Cluster& cluster, int workers, const std::vector<int>& skip = {}) {
  EXPECT_TRUE(cluster.driver().impl().autograd().live().empty()) << "on the driver";
  for (int rank = 1; rank <= workers; ++rank) {
    if (std::find(skip.begin(), skip.end(), rank) != skip.end()) continue;
    auto ids = cluster.driver().rpcSync(cluster.name(rank), runtime::kBuiltinAutogradContexts, {});
    EXPECT_EQ(ids.toListRef().size(), 0u) << "on " << cluster.name(rank);
  }
}

const std::string kDriverLinear = "ag.driver";  // the driver's own, in this process

// The walk both sides of a message agree on: every tensor, depth first, in
// tuples, lists and dict values; mapTensors rebuilds the containers around the
// new tensors and leaves the original alone.
TEST(TensorWalkTest, FindsAndReplacesTensorsInOrder) {
  std::vector<at::Tensor> t;
  for (int i = 0; i < 6; ++i) t.push_back(at::full({1}, static_cast<float>(i)));
  c10::Dict<std::string, at::Tensor> dict;
  dict.insert("b", t[3]);
  dict.insert("a", t[4]);
  c10::List<at::Tensor> list({t[1], t[2]});
  c10::IValue value = Tuple::create(
      {t[0], list, int64_t{7}, dict, Tuple::create({std::string("s"), t[5]}), c10::IValue()});
  std::vector<float> seen;
  runtime::autograd::forEachTensor(value,
                                   [&](const at::Tensor& x) { seen.push_back(x.item<float>()); });
  EXPECT_EQ(seen, (std::vector<float>{0, 1, 2, 3, 4, 5}));
  c10::IValue mapped =
      runtime::autograd::mapTensors(value, [](const at::Tensor& x) { return x.add(10); });
  std::vector<float> after;
  runtime::autograd::forEachTensor(mapped,
                                   [&](const at::Tensor& x) { after.push_back(x.item<float>()); });
  EXPECT_EQ(after, (std::vector<float>{10, 11, 12, 13, 14, 15}));
  std::vector<float> original;
  runtime::autograd::forEachTensor(
      value, [&](const at::Tensor& x) { original.push_back(x.item<float>()); });
  EXPECT_EQ(original, seen);
  std::vector<c10::IValue> items = mapped.toTupleRef().elements().vec();
  ASSERT_EQ(items.size(), 6u);
  EXPECT_EQ(items[2].toInt(), 7);
  EXPECT_TRUE(items[5].isNone());
}

// An expanded gradient (sum()'s) travels as its compact form and its sizes and
// comes back equal; a dense one travels as it is; malformed items are refused.
TEST(GradientWireTest, ExpandedGradientsTravelCompact) {
  namespace ag = runtime::autograd;
  const c10::Device cpu("cpu");
  at::Tensor scalar = at::full({}, 2.5).expand({1000, 1000});
  c10::IValue packed = ag::packGradient(scalar);
  ASSERT_TRUE(packed.isTuple());
  EXPECT_EQ(packed.toTupleRef().elements()[0].toTensor().numel(), 1);
  at::Tensor back = ag::unpackGradient(packed, cpu);
  EXPECT_EQ(back.sizes(), scalar.sizes());
  EXPECT_TRUE(at::equal(back, scalar));

  at::Tensor column = at::arange(3, at::kFloat).reshape({3, 1}).expand({3, 4});
  packed = ag::packGradient(column);
  ASSERT_TRUE(packed.isTuple());
  EXPECT_EQ(packed.toTupleRef().elements()[0].toTensor().sizes(), at::IntArrayRef({3, 1}));
  EXPECT_TRUE(at::equal(ag::unpackGradient(packed, cpu), column));

  at::Tensor dense = at::randn({3, 4});
  packed = ag::packGradient(dense);
  ASSERT_TRUE(packed.isTensor());
  EXPECT_TRUE(packed.toTensor().is_same(dense));
  EXPECT_TRUE(at::equal(ag::unpackGradient(packed, cpu), dense));

  auto sizes = [](std::vector<int64_t> v) {
    return Tuple::create(std::vector<c10::IValue>(v.begin(), v.end()));
  };
  EXPECT_THROW(ag::unpackGradient(Tuple::create({at::ones({1, 1}), sizes({5})}), cpu),
               std::invalid_argument);
  EXPECT_THROW(ag::unpackGradient(Tuple::create({at::ones({2, 1}), sizes({3, 4})}), cpu),
               std::invalid_argument);
  EXPECT_THROW(ag::unpackGradient(Tuple::create({at::ones({1}), sizes({-1})}), cpu),
               std::invalid_argument);
  EXPECT_THROW(ag::unpackGradient(Tuple::create({int64_t{1}, sizes({1})}), cpu),
               std::invalid_argument);
  EXPECT_THROW(ag::unpackGradient(c10::IValue(std::string("g")), cpu), std::invalid_argument);
}

TEST(DistAutogradTest, TwoWorkerSplitMatchesLocalGradients) {
  // The recipe's model: a linear here, one on w1; y = rm(lm(x)).
  Cluster cluster(1);
  auto& rt = cluster.driver();
  auto [lw, lb] = linearParams(32, 32, 1);                                      // the local module
  Linear lm = {linearParams(32, 32, 1).first, linearParams(32, 32, 1).second};  // reference
  Linear rm = makeLinear(rt, "w1", "rm", 32, 32, 2);
  at::Tensor x = at::randn({16, 32});
  {
    dist::Context ctx(rt);
    at::Tensor y =
        rt.rpcSync("w1", "ag.linear", {std::string("rm"), linearForward(lw, lb, x)}).toTensor();
    EXPECT_TRUE(y.requires_grad());
    dist::backward(rt, ctx.id(), {y.sum()});

    at::Tensor ref = linearForward(rm.w, rm.b, linearForward(lm.w, lm.b, x)).sum();
    auto g = localGrads(ref, {lm, rm});
    auto [rw, rb] = remoteGrads(rt, "w1", "rm", ctx.id());
    expectClose(rw, g[2], "w1 weight");
    expectClose(rb, g[3], "w1 bias");
    expectClose(dist::gradientOf(rt, ctx.id(), lw), g[0], "local weight");
    expectClose(dist::gradientOf(rt, ctx.id(), lb), g[1], "local bias");
    EXPECT_FALSE(lw.grad().defined()) << "distributed gradients never land in .grad";
    EXPECT_EQ(dist::getGradients(rt, ctx.id()).size(), 2u);
  }
  expectNoContexts(cluster, 1);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// The gradients that come back to the driver's part of the graph (here: of h,
// sent to w1) run on the thread waiting in backward, not on a pool thread that
// must be woken for them (autograd/help_queue.h).
TEST(DistAutogradTest, GradientsComingBackRunOnTheThreadWaitingInBackward) {
  Cluster cluster(1);
  auto& rt = cluster.driver();
  auto [lw, lb] = linearParams(8, 8, 1);
  makeLinear(rt, "w1", "rm", 8, 8, 2);
  for (int step = 0; step < 3; ++step) {
    dist::Context ctx(rt);
    at::Tensor h = linearForward(lw, lb, at::randn({4, 8}));
    std::atomic<int> hooks{0};
    std::thread::id ranOn;
    h.register_hook([&](const at::Tensor& g) {
      ranOn = std::this_thread::get_id();
      ++hooks;
      return g;
    });
    at::Tensor y = rt.rpcSync("w1", "ag.linear", {std::string("rm"), h}).toTensor();
    dist::backward(rt, ctx.id(), {y.sum()});
    EXPECT_EQ(hooks.load(), 1) << "step " << step;
    EXPECT_EQ(ranOn, std::this_thread::get_id()) << "step " << step;
    EXPECT_TRUE(dist::gradientOf(rt, ctx.id(), lw).defined()) << "step " << step;
  }
  expectNoContexts(cluster, 1);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

TEST(DistAutogradTest, ThreeWorkerChainNestedCallsAndToHere) {
  Cluster cluster(3);
  auto& rt = cluster.driver();
  Linear l1 = makeLinear(rt, "w1", "l1", 8, 6, 11);
  Linear l2 = makeLinear(rt, "w2", "l2", 6, 5, 12);
  Linear l3 = makeLinear(rt, "w3", "l3", 5, 4, 13);
  Linear l0 = makeLinear(rt, "driver", kDriverLinear, 4, 3, 14);
  at::Tensor x = at::randn({7, 8});

  // The driver calls each worker in turn: x -> w1 -> w2 -> w3.
  {
    dist::Context ctx(rt);
    at::Tensor y = x;
    for (const auto& [worker, name] : std::vector<std::pair<std::string, std::string>>{
             {"w1", "l1"}, {"w2", "l2"}, {"w3", "l3"}}) {
      y = rt.rpcSync(worker, "ag.linear", {name, y}).toTensor();
    }
    dist::backward(rt, ctx.id(), {y.pow(2).sum()});
    at::Tensor ref =
        linearForward(l3.w, l3.b, linearForward(l2.w, l2.b, linearForward(l1.w, l1.b, x)))
            .pow(2)
            .sum();
    auto g = localGrads(ref, {l1, l2, l3});
    for (int i = 0; i < 3; ++i) {
      std::string w = "w" + std::to_string(i + 1), name = "l" + std::to_string(i + 1);
      auto [gw, gb] = remoteGrads(rt, w, name, ctx.id());
      expectClose(gw, g[2 * i], w + " weight");
      expectClose(gb, g[2 * i + 1], w + " bias");
    }
  }
  expectNoContexts(cluster, 3);

  // Nested: driver -> w1 -> w2 -> driver, each answering the one before.
  {
    dist::Context ctx(rt);
    at::Tensor xr = x.clone().requires_grad_(true);  // a leaf here that requires grad
    auto route =
        Tuple::create({std::string("w1"), std::string("l1"), std::string("w2"), std::string("l2"),
                       std::string("driver"), std::string("ag.driver4")});
    Linear l4 = makeLinear(rt, "driver", "ag.driver4", 5, 3, 15);
    at::Tensor y = rt.rpcSync("w1", "ag.pipe", {xr, route}).toTensor();
    dist::backward(rt, ctx.id(), {y.sum()});
    at::Tensor ref =
        linearForward(l4.w, l4.b, linearForward(l2.w, l2.b, linearForward(l1.w, l1.b, xr)))
            .mul(2)
            .mul(2)
            .sum();
    auto g = torch::autograd::grad({ref}, {l1.w, l1.b, l2.w, l2.b, l4.w, l4.b, xr});
    auto [g1w, g1b] = remoteGrads(rt, "w1", "l1", ctx.id());
    auto [g2w, g2b] = remoteGrads(rt, "w2", "l2", ctx.id());
    expectClose(g1w, g[0], "w1 weight");
    expectClose(g1b, g[1], "w1 bias");
    expectClose(g2w, g[2], "w2 weight");
    expectClose(g2b, g[3], "w2 bias");
    auto [g4w, g4b] = remoteGrads(rt, "driver", "ag.driver4", ctx.id());
    expectClose(g4w, g[4], "driver weight (reached through w2's call back)");
    expectClose(g4b, g[5], "driver bias");
    expectClose(dist::gradientOf(rt, ctx.id(), xr), g[6], "driver input");
  }
  expectNoContexts(cluster, 3);

  // An RRef's toHere inside the graph: remote() on w1 then fetch.
  {
    dist::Context ctx(rt);
    at::Tensor h = rt.rpcSync("driver", "ag.linear", {kDriverLinear, at::randn({2, 4})}).toTensor();
    (void)h;
    at::Tensor xr = x.clone().requires_grad_(true);
    runtime::RRef r = rt.remote("w1", "ag.linear", {std::string("l1"), xr});
    at::Tensor y = r.toHere().toTensor();
    EXPECT_TRUE(y.requires_grad());
    dist::backward(rt, ctx.id(), {y.sum()});
    auto g = torch::autograd::grad({linearForward(l1.w, l1.b, xr).sum()}, {l1.w, l1.b, xr});
    auto [gw, gb] = remoteGrads(rt, "w1", "l1", ctx.id());
    expectClose(gw, g[0], "w1 weight through toHere");
    expectClose(gb, g[1], "w1 bias through toHere");
    expectClose(dist::gradientOf(rt, ctx.id(), xr), g[2], "driver input through remote()");
  }
  expectNoContexts(cluster, 3);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

TEST(DistAutogradTest, RetainGraphAccumulatesAndBadGradientsAreRefused) {
  Cluster cluster(1);
  auto& rt = cluster.driver();
  Linear l1 = makeLinear(rt, "w1", "l1", 4, 4, 71);
  at::Tensor x = at::randn({3, 4});
  {
    dist::Context ctx(rt);
    at::Tensor y = rt.rpcSync("w1", "ag.linear", {std::string("l1"), x}).toTensor().exp().sum();
    dist::backward(rt, ctx.id(), {y}, /*retainGraph=*/true);
    dist::backward(rt, ctx.id(), {y});  // gradients accumulate in the context
    auto g = localGrads(linearForward(l1.w, l1.b, x).exp().sum(), {l1});
    auto [gw, gb] = remoteGrads(rt, "w1", "l1", ctx.id());
    expectClose(gw, g[0].mul(2), "w1 weight, twice");
    expectClose(gb, g[1].mul(2), "w1 bias, twice");
    // Without retainGraph the local graph is gone: a third pass fails clearly.
    EXPECT_THROW(dist::backward(rt, ctx.id(), {y}), runtime::RpcError);

    // Gradients a peer sends for a send it never made, or of the wrong shape.
    EXPECT_THROW(rt.rpcSync("w1", "rpcjob.autograd.gradients",
                            {ctx.id(), int64_t{999}, Tuple::create({at::ones({3, 4})})}),
                 runtime::RpcError);
    EXPECT_THROW(rt.rpcSync("w1", "rpcjob.autograd.gradients",
                            {ctx.id(), int64_t{1}, Tuple::create({at::ones({5, 5})})}),
                 runtime::RpcError);
    EXPECT_THROW(rt.rpcSync("w1", "rpcjob.autograd.gradients",
                            {ctx.id(), int64_t{1},
                             Tuple::create({Tuple::create({at::ones({1, 1}), int64_t{3}})})}),
                 runtime::RpcError);
    EXPECT_THROW(dist::backward(rt, ctx.id(), {x}), runtime::RpcError);  // no grad required
  }
  EXPECT_THROW(dist::getGradients(rt, 12345), runtime::RpcError);
  expectNoContexts(cluster, 1);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

TEST(DistAutogradTest, ConcurrentContextsKeepTheirGradientsApart) {
  Cluster cluster(2);
  auto& rt = cluster.driver();
  Linear l1 = makeLinear(rt, "w1", "l1", 8, 8, 21);
  Linear l2 = makeLinear(rt, "w2", "l2", 8, 4, 22);
  constexpr int kThreads = 4;
  std::vector<at::Tensor> xs;
  for (int i = 0; i < kThreads; ++i) xs.push_back(at::randn({3 + i, 8}));
  std::vector<std::vector<at::Tensor>> remote(kThreads);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      try {
        dist::Context ctx(rt);
        for (int round = 0; round < 3; ++round) {  // interleave with the other threads
          std::this_thread::yield();
        }
        at::Tensor h = rt.rpcSync("w1", "ag.linear", {std::string("l1"), xs[i]}).toTensor();
        at::Tensor y = rt.rpcSync("w2", "ag.linear", {std::string("l2"), h}).toTensor();
        dist::backward(rt, ctx.id(), {y.sum().mul(i + 1)});
        auto [a, b] = remoteGrads(rt, "w1", "l1", ctx.id());
        auto [c, d] = remoteGrads(rt, "w2", "l2", ctx.id());
        remote[i] = {a, b, c, d};
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_EQ(errors[i], "") << "thread " << i;
    at::Tensor ref = linearForward(l2.w, l2.b, linearForward(l1.w, l1.b, xs[i])).sum().mul(i + 1);
    auto g = localGrads(ref, {l1, l2});
    for (int k = 0; k < 4; ++k) expectClose(remote[i][k], g[k], "thread " + std::to_string(i));
  }
  expectNoContexts(cluster, 2);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

TEST(DistAutogradTest, ARemoteBackwardThatThrowsFailsTheDriversBackward) {
  Cluster cluster(2);
  auto& rt = cluster.driver();
  makeLinear(rt, "w1", "l1", 4, 4, 31);
  {
    dist::Context ctx(rt);
    at::Tensor h = rt.rpcSync("w1", "ag.linear", {std::string("l1"), at::randn({2, 4})}).toTensor();
    at::Tensor y = rt.rpcSync("w2", "ag.throw_in_backward", {h}).toTensor();
    try {
      dist::backward(rt, ctx.id(), {y.sum()});
      FAIL() << "backward succeeded";
    } catch (const runtime::RpcError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("w2"), std::string::npos) << what;
      EXPECT_NE(what.find("boom in backward on w2"), std::string::npos) << what;
    }
  }
  expectNoContexts(cluster, 2);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

TEST(DistAutogradTest, AWorkerDyingDuringBackwardFailsItPromptly) {
  runtime::RuntimeOptions options;
  options.defaultTimeout = std::chrono::seconds(20);
  Cluster cluster(2, options);
  auto& rt = cluster.driver();
  makeLinear(rt, "w1", "l1", 4, 4, 41);
  auto started = std::chrono::steady_clock::now();
  {
    dist::Context ctx(rt);
    at::Tensor h = rt.rpcSync("w1", "ag.linear", {std::string("l1"), at::randn({2, 4})}).toTensor();
    // w1 -> w2 nested, so the death is one hop away from the driver.
    at::Tensor y = rt.rpcSync("w2", "ag.exit_in_backward", {h}).toTensor();
    try {
      dist::backward(rt, ctx.id(), {y.sum()});
      FAIL() << "backward succeeded";
    } catch (const runtime::RpcError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("w2"), std::string::npos) << what;
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  expectNoContexts(cluster, 2, /*skip=*/{2});
  cluster.shutdown(std::chrono::seconds(20));
}

TEST(DistAutogradTest, AHangingBackwardFailsWithinTheCallTimeout) {
  runtime::RuntimeOptions options;
  options.defaultTimeout = std::chrono::milliseconds(1500);
  Cluster cluster(1, options);
  auto& rt = cluster.driver();
  auto started = std::chrono::steady_clock::now();
  {
    dist::Context ctx(rt);
    at::Tensor x = at::randn({2, 2}).requires_grad_(true);
    at::Tensor y = rt.rpcSync("w1", "ag.sleep_in_backward", {x, int64_t{4000}}).toTensor();
    try {
      dist::backward(rt, ctx.id(), {y.sum()});
      FAIL() << "backward succeeded";
    } catch (const runtime::RpcError& e) {
      EXPECT_EQ(e.code(), runtime::ErrorCode::kTimeout) << e.what();
      EXPECT_NE(std::string(e.what()).find("w1"), std::string::npos) << e.what();
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(3500));
  // Released everywhere although w1 is still in its backward; its late
  // gradients find no context here and bring none back.
  expectNoContexts(cluster, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  expectNoContexts(cluster, 1);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

// N steps of the optimizer through DistributedOptimizer and locally.
template <typename Options, typename Local>
void trainAndCompare(const Options& options) {
  Cluster cluster(2);
  auto& rt = cluster.driver();
  Linear l0 = makeLinear(rt, "driver", kDriverLinear, 6, 6, 50);
  Linear l1 = makeLinear(rt, "w1", "l1", 6, 5, 51);
  Linear l2 = makeLinear(rt, "w2", "l2", 5, 3, 52);
  // Parameters on two other workers and on this one (remote() to itself).
  std::vector<runtime::RRef> params;
  for (const auto& [worker, name] : std::vector<std::pair<std::string, std::string>>{
           {"driver", kDriverLinear}, {"w1", "l1"}, {"w2", "l2"}}) {
    for (int64_t i = 0; i < 2; ++i) params.push_back(rt.remote(worker, "ag.param", {name, i}));
  }
  for (auto& p : params) p.confirmed().value();
  auto [w0, b0] = localLinear(kDriverLinear);
  std::vector<at::Tensor> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(at::randn({4, 6}));
  {
    runtime::DistributedOptimizer opt(rt, params, options);
    for (const auto& x : xs) {
      dist::Context ctx(rt);
      at::Tensor h0 = linearForward(w0, b0, x);
      at::Tensor h = rt.rpcSync("w1", "ag.linear", {std::string("l1"), h0}).toTensor();
      at::Tensor y = rt.rpcSync("w2", "ag.linear", {std::string("l2"), h}).toTensor();
      dist::backward(rt, ctx.id(), {y.pow(2).sum()});
      opt.step(ctx.id());
    }
  }
  Local local({l0.w, l0.b, l1.w, l1.b, l2.w, l2.b}, options);
  for (const auto& x : xs) {
    local.zero_grad();
    linearForward(l2.w, l2.b, linearForward(l1.w, l1.b, linearForward(l0.w, l0.b, x)))
        .pow(2)
        .sum()
        .backward();
    local.step();
  }
  auto w1 = rt.rpcSync("w1", "ag.weights", {std::string("l1")}).toTuple();
  auto w2 = rt.rpcSync("w2", "ag.weights", {std::string("l2")}).toTuple();
  expectClose(w0.detach(), l0.w.detach(), "driver weight");
  expectClose(b0.detach(), l0.b.detach(), "driver bias");
  EXPECT_FALSE(w0.grad().defined());
  expectClose(w1->elements()[0].toTensor(), l1.w.detach(), "w1 weight");
  expectClose(w1->elements()[1].toTensor(), l1.b.detach(), "w1 bias");
  expectClose(w2->elements()[0].toTensor(), l2.w.detach(), "w2 weight");
  expectClose(w2->elements()[1].toTensor(), l2.b.detach(), "w2 bias");
  // Training moved the weights at all (the comparison is not vacuous).
  EXPECT_FALSE(at::allclose(l1.w.detach(), linearParams(6, 5, 51).first.detach()));
  params.clear();
  expectNoContexts(cluster, 2);
  for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
}

TEST(DistOptimizerTest, SgdWithMomentumEqualsLocalTraining) {
  trainAndCompare<torch::optim::SGDOptions, torch::optim::SGD>(
      torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
}

TEST(DistOptimizerTest, AdamEqualsLocalTraining) {
  trainAndCompare<torch::optim::AdamOptions, torch::optim::Adam>(
      torch::optim::AdamOptions(0.01).betas({0.8, 0.99}));
}

TEST(DistOptimizerTest, AStepWithoutTheContextReportsTheOwner) {
  Cluster cluster(1);
  auto& rt = cluster.driver();
  makeLinear(rt, "w1", "l1", 3, 3, 61);
  std::vector<runtime::RRef> params{rt.remote("w1", "ag.param", {std::string("l1"), int64_t{0}})};
  runtime::DistributedOptimizer opt(rt, params, torch::optim::SGDOptions(0.1));
  dist::Context ctx(rt);  // never reached w1
  try {
    opt.step(ctx.id());
    FAIL() << "step succeeded";
  } catch (const runtime::RpcError& e) {
    EXPECT_NE(std::string(e.what()).find("w1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no distributed autograd context"), std::string::npos)
        << e.what();
  }
  // A value that is not a parameter is refused when the optimizer is made.
  std::vector<runtime::RRef> bad{rt.remote("w1", "identity", {at::ones({2})})};
  EXPECT_THROW(runtime::DistributedOptimizer(rt, bad, torch::optim::SGDOptions(0.1)),
               runtime::RpcError);
}

}  // namespace
}  // namespace rpcjob::testing
