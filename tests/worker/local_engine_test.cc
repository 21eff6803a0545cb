// runLocalBackward (worker/src/autograd/local_engine.h) against libtorch's
// engine with the same arguments: the same captured gradients for chains,
// diamonds, several roots, outputs at leaves and inside the graph, branches
// that lead to no output (not run), undefined and sparse gradients, expanded
// root gradients, a kept graph run twice, a node that throws, graphs with
// hooks (which go to libtorch's engine) and random graphs. CPU; the CUDA cases
// (streams) skip themselves without a GPU.
#include "autograd/local_engine.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace rpcjob::runtime::autograd {
namespace {

namespace ta = torch::autograd;
using Tensors = std::vector<at::Tensor>;

ta::Edge edgeOf(const at::Tensor& t) {
  return ta::impl::gradient_edge(t);
}

at::Tensor dense(const at::Tensor& t) {
  return t.is_sparse() ? t.to_dense() : t;
}

// Both engines, libtorch's first (both keep the graph): the same gradients,
// and this one ran the pass itself (without `reason`), or why it did not.
Tensors expectSameAsLibtorch(const ta::edge_list& roots, const Tensors& grads,
                             const ta::edge_list& outputs, const std::string& what = "",
                             std::string* reason = nullptr) {
  Tensors expected = runLibtorchBackward(roots, grads, outputs);
  std::string why = "not set";
  Tensors actual = runLocalBackward(roots, grads, outputs, &why);
  if (reason == nullptr) {
    EXPECT_EQ(why, "") << what;
  } else {
    *reason = why;
  }
  EXPECT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < std::min(actual.size(), expected.size()); ++i) {
    EXPECT_EQ(actual[i].defined(), expected[i].defined()) << what << ": output " << i;
    if (!actual[i].defined() || !expected[i].defined()) continue;
    EXPECT_EQ(actual[i].sizes(), expected[i].sizes()) << what << ": output " << i;
    EXPECT_EQ(actual[i].scalar_type(), expected[i].scalar_type()) << what << ": output " << i;
    EXPECT_EQ(actual[i].layout(), expected[i].layout()) << what << ": output " << i;
    const bool fp64 = actual[i].scalar_type() == at::kDouble;
    EXPECT_TRUE(
        at::allclose(dense(actual[i]), dense(expected[i]), fp64 ? 1e-6 : 1e-4, fp64 ? 1e-8 : 1e-5))
        << what << ": output " << i << "\n"
        << actual[i] << "\nvs\n"
        << expected[i];
  }
  return actual;
}

at::Tensor leaf(std::vector<int64_t> shape, at::ScalarType type = at::kDouble) {
  return at::randn(shape, at::TensorOptions().dtype(type)).requires_grad_();
}

// x -> x * 3 whose backward counts its calls.
struct Counted : ta::Function<Counted> {
  static std::atomic<int> calls;
  static at::Tensor forward(ta::AutogradContext*, at::Tensor x) { return x * 3; }
  static ta::variable_list backward(ta::AutogradContext*, ta::variable_list g) {
    ++calls;
    return {g[0] * 3};
  }
};
std::atomic<int> Counted::calls{0};

struct ThrowsStd : ta::Function<ThrowsStd> {
  static at::Tensor forward(ta::AutogradContext*, at::Tensor x) { return x.clone(); }
  static ta::variable_list backward(ta::AutogradContext*, ta::variable_list) {
    throw std::runtime_error("boom in a backward");
  }
};

struct ThrowsC10 : ta::Function<ThrowsC10> {
  static at::Tensor forward(ta::AutogradContext*, at::Tensor x) { return x.clone(); }
  static ta::variable_list backward(ta::AutogradContext*, ta::variable_list) {
    TORCH_CHECK(false, "kaboom in a backward");
  }
};

// Gives no gradient to its input.
struct NoGradient : ta::Function<NoGradient> {
  static at::Tensor forward(ta::AutogradContext*, at::Tensor x) { return x * 2; }
  static ta::variable_list backward(ta::AutogradContext*, ta::variable_list) {
    return {at::Tensor()};
  }
};

// Gives a gradient of the wrong shape, or of another dtype.
struct WrongShape : ta::Function<WrongShape> {
  static at::Tensor forward(ta::AutogradContext*, at::Tensor x) { return x.clone(); }
  static ta::variable_list backward(ta::AutogradContext*, ta::variable_list) {
    return {at::ones({7}, at::kDouble)};
  }
};
struct OtherDtype : ta::Function<OtherDtype> {
  static at::Tensor forward(ta::AutogradContext*, at::Tensor x) { return x.clone(); }
  static ta::variable_list backward(ta::AutogradContext*, ta::variable_list g) {
    return {g[0].to(at::kDouble) * 2};
  }
};

TEST(LocalEngineTest, AChainCapturesItsLeaf) {
  at::Tensor x = leaf({3, 4});
  at::Tensor y = x.sin().mul(2).exp().tanh();
  Tensors g = expectSameAsLibtorch({edgeOf(y.sum())}, {at::ones({})}, {edgeOf(x)});
  EXPECT_TRUE(at::allclose(g[0], ta::grad({y.sum()}, {x})[0]));
}

TEST(LocalEngineTest, ADiamondSumsTheGradientsOfATensorUsedTwice) {
  at::Tensor x = leaf({3, 4});
  at::Tensor w = leaf({3, 4});
  at::Tensor a = x * w;
  at::Tensor b = a.sin() + a.cos() * a;  // a three times, through two paths
  expectSameAsLibtorch({edgeOf(b.sum())}, {at::ones({})}, {edgeOf(x), edgeOf(w)});
}

TEST(LocalEngineTest, SeveralRootsAndTheSameRootTwice) {
  at::Tensor x = leaf({3, 4});
  at::Tensor w = leaf({4});
  at::Tensor u = (x * w).sin();
  at::Tensor v = x.exp();
  at::Tensor gu = at::randn({3, 4}, at::kDouble);
  at::Tensor gv = at::randn({3, 4}, at::kDouble);
  expectSameAsLibtorch({edgeOf(u), edgeOf(v)}, {gu, gv}, {edgeOf(x), edgeOf(w)});
  // The same root twice: its gradients are summed, and neither is written to.
  at::Tensor before = gu.clone();
  expectSameAsLibtorch({edgeOf(u), edgeOf(u)}, {gu, gu}, {edgeOf(x), edgeOf(w)});
  EXPECT_TRUE(at::equal(gu, before));
}

TEST(LocalEngineTest, OutputsInsideTheGraphCaptureAndStopOrGoOn) {
  at::Tensor x = leaf({3, 4});
  at::Tensor y = x.sin();
  at::Tensor z = Counted::apply(y);
  at::Tensor root = z.exp().sum();
  Counted::calls = 0;
  // At y's node: captured there; Counted is on the way and runs (once per engine).
  expectSameAsLibtorch({edgeOf(root)}, {at::ones({})}, {edgeOf(y)}, "at y");
  EXPECT_EQ(Counted::calls, 2);
  // At z's node (Counted's backward): captured, and nothing runs past it.
  Counted::calls = 0;
  Tensors g = expectSameAsLibtorch({edgeOf(root)}, {at::ones({})}, {edgeOf(z)}, "at z");
  EXPECT_EQ(Counted::calls, 0);
  EXPECT_TRUE(at::allclose(g[0], z.exp()));
  // At y and at x: y's node captures and also runs, since x lies beyond it.
  Counted::calls = 0;
  expectSameAsLibtorch({edgeOf(root)}, {at::ones({})}, {edgeOf(y), edgeOf(x), edgeOf(y)},
                       "at y and x");
  EXPECT_EQ(Counted::calls, 2);
}

TEST(LocalEngineTest, ABranchLeadingToNoOutputDoesNotRun) {
  at::Tensor x = leaf({3, 4});
  at::Tensor w = leaf({3, 4});
  // From a root of its own: not run here.
  at::Tensor toX = (x * 2).sum();
  at::Tensor toW = Counted::apply(w).sum();
  Counted::calls = 0;
  expectSameAsLibtorch({edgeOf(toX), edgeOf(toW)}, {at::ones({}), at::ones({})}, {edgeOf(x)});
  EXPECT_EQ(Counted::calls, 0);
  // From a node that runs: libtorch's engine tells that node not to compute
  // the branch's gradient, which only it can, so the pass goes there.
  at::Tensor root = (x * Counted::apply(w)).sum();
  std::string reason;
  expectSameAsLibtorch({edgeOf(root)}, {at::ones({})}, {edgeOf(x)}, "inner branch", &reason);
  EXPECT_NE(reason.find("MulBackward0 has an input no output needs"), std::string::npos) << reason;
  EXPECT_EQ(Counted::calls, 0);
  // With w asked for, it runs (once per engine).
  expectSameAsLibtorch({edgeOf(root)}, {at::ones({})}, {edgeOf(x), edgeOf(w)});
  EXPECT_EQ(Counted::calls, 2);
}

TEST(LocalEngineTest, UndefinedAndUnreachedGradients) {
  at::Tensor x = leaf({3, 4});
  at::Tensor w = leaf({3, 4});
  at::Tensor other = leaf({2});
  // Only the first chunk is used: the split's backward gets an undefined
  // gradient for the second; NoGradient gives w none at all.
  at::Tensor first = at::cat({x, w}, 0).split(3, 0)[0];
  at::Tensor root = (first.sin() + NoGradient::apply(w)).sum();
  Tensors g =
      expectSameAsLibtorch({edgeOf(root)}, {at::ones({})}, {edgeOf(x), edgeOf(w), edgeOf(other)});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[2].defined()) << "a leaf the roots do not reach";
  // A root without a gradient (libtorch's engine takes none: 1.13 aborts):
  // nothing flows from it.
  g = runLocalBackward({edgeOf(root), edgeOf(w * 2)}, {at::Tensor(), at::ones({3, 4})},
                       {edgeOf(x), edgeOf(w)});
  EXPECT_FALSE(g[0].defined());
  EXPECT_TRUE(at::allclose(g[1], at::full({3, 4}, 2.0, at::kDouble)));
}

TEST(LocalEngineTest, SparseGradientsAreSummed) {
  at::Tensor weight = leaf({10, 3});
  at::Tensor a = at::embedding(weight, at::tensor({1, 2, 2}), -1, false, /*sparse=*/true);
  at::Tensor b = at::embedding(weight, at::tensor({2, 7}), -1, false, /*sparse=*/true);
  Tensors g =
      expectSameAsLibtorch({edgeOf((a.sum() + b.sum() * 2))}, {at::ones({})}, {edgeOf(weight)});
  EXPECT_DOUBLE_EQ(dense(g[0])[2][0].item<double>(), 4.0);
}

TEST(LocalEngineTest, ExpandedBroadcastAndOtherDtypeRootGradients) {
  at::Tensor x = leaf({3, 4});
  at::Tensor y = x * 2;
  // The gradient of a sum(): one scalar with stride-0 strides.
  expectSameAsLibtorch({edgeOf(y)}, {at::ones({}, at::kDouble).expand({3, 4})}, {edgeOf(x)},
                       "expanded");
  // Broadcast: summed back to the root's shape.
  Tensors g = expectSameAsLibtorch({edgeOf(y)}, {at::ones({2, 3, 4}, at::kDouble)}, {edgeOf(x)},
                                   "broadcast");
  EXPECT_TRUE(at::allclose(g[0], at::full({3, 4}, 4.0, at::kDouble)));
  // Another dtype: cast to the root's.
  g = expectSameAsLibtorch({edgeOf(y)}, {at::ones({3, 4}, at::kFloat)}, {edgeOf(x)}, "dtype");
  EXPECT_EQ(g[0].scalar_type(), at::kDouble);
  // A node's gradient of another dtype is cast too.
  at::Tensor f = leaf({3}, at::kFloat);
  g = expectSameAsLibtorch({edgeOf(OtherDtype::apply(f).sum())}, {at::ones({})}, {edgeOf(f)});
  EXPECT_EQ(g[0].scalar_type(), at::kFloat);
}

TEST(LocalEngineTest, BadGradientsAreErrorsNamingTheFunction) {
  at::Tensor x = leaf({2, 3});
  at::Tensor y = WrongShape::apply(x).sum();
  try {
    runLocalBackward({edgeOf(y)}, {at::ones({})}, {edgeOf(x)});
    FAIL() << "a gradient of the wrong shape was accepted";
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("WrongShape"), std::string::npos) << what;
    EXPECT_NE(what.find("invalid gradient at index 0"), std::string::npos) << what;
  }
  EXPECT_THROW(runLocalBackward({edgeOf(y)}, {at::ones({}), at::ones({})}, {edgeOf(x)}),
               c10::Error);
  EXPECT_THROW(runLocalBackward({edgeOf(y)}, {at::ones({})}, {}), c10::Error);
}

TEST(LocalEngineTest, AKeptGraphRunsTwiceWithTheSameResult) {
  at::Tensor x = leaf({3, 4});
  at::Tensor w = leaf({4, 4});
  at::Tensor root = x.matmul(w).relu().pow(2).sum();
  Tensors first = runLocalBackward({edgeOf(root)}, {at::ones({})}, {edgeOf(x), edgeOf(w)});
  Tensors second = runLocalBackward({edgeOf(root)}, {at::ones({})}, {edgeOf(x), edgeOf(w)});
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(at::equal(first[i], second[i]));
  // The saved tensors are still there for libtorch's engine, too.
  expectSameAsLibtorch({edgeOf(root)}, {at::ones({})}, {edgeOf(x), edgeOf(w)});
  EXPECT_FALSE(x.grad().defined()) << "captured, never accumulated";
}

TEST(LocalEngineTest, ANodeThatThrowsFailsThePassNamingIt) {
  at::Tensor x = leaf({3});
  at::Tensor viaStd = (ThrowsStd::apply(x) * 2).sum();
  try {
    runLocalBackward({edgeOf(viaStd)}, {at::ones({})}, {edgeOf(x)});
    FAIL() << "no error";
  } catch (const std::exception& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("boom in a backward"), std::string::npos) << what;
    EXPECT_NE(what.find("ThrowsStd"), std::string::npos) << what;
  }
  at::Tensor viaC10 = (ThrowsC10::apply(x) * 2).sum();
  try {
    runLocalBackward({edgeOf(viaC10)}, {at::ones({})}, {edgeOf(x)});
    FAIL() << "no error";
  } catch (const c10::Error& e) {  // the same type as thrown
    std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("kaboom in a backward"), std::string::npos) << what;
    EXPECT_NE(what.find("ThrowsC10"), std::string::npos) << what;
  }
}

TEST(LocalEngineTest, HooksAndAnomalyModeGoToLibtorchsEngine) {
  at::Tensor x = leaf({3, 4});
  at::Tensor y = x * 2;
  y.register_hook([](const at::Tensor& g) { return g * 10; });
  at::Tensor root = y.sum();
  std::string reason;
  Tensors g = runLocalBackward({edgeOf(root)}, {at::ones({})}, {edgeOf(x)}, &reason);
  EXPECT_NE(reason.find("hooks"), std::string::npos) << reason;
  EXPECT_TRUE(at::allclose(g[0], at::full({3, 4}, 20.0, at::kDouble))) << "the hook ran";

  at::Tensor z = x.sin();
  z.retain_grad();
  runLocalBackward({edgeOf(z.sum())}, {at::ones({})}, {edgeOf(x)}, &reason);
  EXPECT_NE(reason, "") << "retain_grad";

  // A hook on a captured leaf: whichever engine runs, the gradient is libtorch's.
  at::Tensor hooked = leaf({3});
  hooked.register_hook([](const at::Tensor& g) { return g * 10; });
  at::Tensor viaLeaf = (hooked * 3).sum();
  Tensors expected = runLibtorchBackward({edgeOf(viaLeaf)}, {at::ones({})}, {edgeOf(hooked)});
  g = runLocalBackward({edgeOf(viaLeaf)}, {at::ones({})}, {edgeOf(hooked)}, &reason);
  EXPECT_TRUE(at::allclose(g[0], expected[0])) << g[0] << " vs " << expected[0] << ": " << reason;

  at::Tensor plain = x.cos().sum();
  ta::AnomalyMode::set_enabled(true);
  g = runLocalBackward({edgeOf(plain)}, {at::ones({})}, {edgeOf(x)}, &reason);
  ta::AnomalyMode::set_enabled(false);
  EXPECT_NE(reason.find("anomaly"), std::string::npos) << reason;
  EXPECT_TRUE(at::allclose(g[0], -x.sin()));
  runLocalBackward({edgeOf(plain)}, {at::ones({})}, {edgeOf(x)}, &reason);
  EXPECT_EQ(reason, "");
}

// Random graphs of a few ops over a few leaves (tensors reused: diamonds;
// detach and split: cut paths and undefined gradients), random roots and
// outputs (leaves and intermediate tensors).
TEST(LocalEngineTest, RandomGraphsMatchLibtorch) {
  std::mt19937 rng(20261125);
  at::manual_seed(7);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int ranHere = 0;
  const int graphs = 200;
  for (int graph = 0; graph < graphs; ++graph) {
    Tensors leaves = {leaf({3, 4}), leaf({3, 4}), leaf({3, 4})};
    at::Tensor bias = leaf({4});
    at::Tensor square = leaf({4, 4});
    Tensors pool = leaves;
    int nodes = 3 + static_cast<int>(pick(18));
    for (int n = 0; n < nodes; ++n) {
      const at::Tensor& a = pool[pick(pool.size())];
      const at::Tensor& b = pool[pick(pool.size())];
      at::Tensor out;
      switch (pick(10)) {
        case 0:
          out = a + b;
          break;
        case 1:
          out = a * b;
          break;
        case 2:
          out = a.sin();
          break;
        case 3:
          out = a.tanh() * 0.5;
          break;
        case 4:
          out = a * bias;
          break;
        case 5:
          out = a.matmul(square) * 0.3;
          break;
        case 6:
          out = at::cat({a, b}, 0).split(3, 0)[pick(2)];
          break;
        case 7:
          out = a.sum(1, true).expand({3, 4});
          break;
        case 8:
          out = a.detach() * b;
          break;
        default:
          out = Counted::apply(a) - b;
          break;
      }
      pool.push_back(out);
    }
    Tensors candidates = leaves;
    candidates.push_back(bias);
    candidates.push_back(square);
    for (size_t i = 3; i < pool.size(); ++i) {
      if (pool[i].requires_grad()) candidates.push_back(pool[i]);
    }
    // Roots: mostly among the last tensors built, at times any (a leaf too).
    ta::edge_list roots;
    Tensors grads;
    size_t rootCount = 1 + pick(3);
    for (size_t r = 0; r < rootCount; ++r) {
      size_t back =
          pick(4) == 0 ? pick(candidates.size()) : pick(std::min<size_t>(6, candidates.size()));
      const at::Tensor& t = candidates[candidates.size() - 1 - back];
      if (pick(2) == 0) {
        roots.push_back(edgeOf(t.sum()));
        grads.push_back(at::ones({}, at::kDouble));
      } else {
        roots.push_back(edgeOf(t));
        grads.push_back(at::randn(t.sizes(), at::kDouble));
      }
    }
    // Outputs: every leaf and some tensors inside, as a worker's pass has them
    // (always run here), or any few (some inner branch may lead to none: then
    // the pass goes to libtorch's engine).
    ta::edge_list outputs;
    const bool everyLeaf = graph % 2 == 0;
    size_t outputCount = everyLeaf ? pick(3) : 1 + pick(4);
    if (everyLeaf) {
      for (size_t i = 0; i < 5; ++i) outputs.push_back(edgeOf(candidates[i]));
    }
    for (size_t o = 0; o < outputCount; ++o) {
      outputs.push_back(edgeOf(candidates[pick(candidates.size())]));
    }
    std::string reason;
    expectSameAsLibtorch(roots, grads, outputs, "graph " + std::to_string(graph),
                         everyLeaf ? nullptr : &reason);
    if (reason.empty()) ++ranHere;
    if (::testing::Test::HasFailure()) break;
  }
  // Every pass of the first kind, and some of the others.
  EXPECT_GT(ranHere, graphs / 2 + graphs / 10);
  std::cout << ranHere << " of " << graphs << " random passes ran on the calling thread\n";
}

TEST(LocalEngineTest, TheEnvironmentPicksTheEngine) {
  EXPECT_EQ(parseAutogradEngine(nullptr), AutogradEngine::kThread);
  EXPECT_EQ(parseAutogradEngine(""), AutogradEngine::kThread);
  EXPECT_EQ(parseAutogradEngine("thread"), AutogradEngine::kThread);
  EXPECT_EQ(parseAutogradEngine("libtorch"), AutogradEngine::kLibtorch);
  try {
    parseAutogradEngine("cuda");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("RPCJOB_AUTOGRAD_ENGINE"), std::string::npos);
  }
}

// CUDA: a forward on a side stream, backward from the default stream; the
// captured gradients are used on the caller's stream right after (what the
// worker does when it sends them).
TEST(LocalEngineTest, CudaStreamsMatchLibtorch) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA";
  c10::Device device(c10::DeviceType::CUDA, 0);
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  c10::Stream side = impl.getStreamFromGlobalPool(device);
  auto opts = at::TensorOptions().device(device).dtype(at::kFloat);
  for (int round = 0; round < 20; ++round) {
    at::Tensor x = at::randn({512, 512}, opts).requires_grad_();
    at::Tensor w = at::randn({512, 512}, opts).requires_grad_();
    at::Tensor u, v;
    {
      c10::StreamGuard onSide(side);
      // This stream must see x and w first.
      c10::Event ready(c10::DeviceType::CUDA);
      ready.record(impl.getDefaultStream(device));
      ready.block(side);
      at::Tensor h = x.matmul(w) * (1.0 / 32);  // entries of about 1
      u = h.sin() + h * h;                      // a diamond on the side stream
      v = (h.exp() * 1e-3).sum();
      c10::Event done(c10::DeviceType::CUDA);
      done.record(side);
      done.block(impl.getDefaultStream(device));
    }
    at::Tensor root = u.sum() + v;  // on the default stream
    Tensors g = expectSameAsLibtorch(
        {edgeOf(root), edgeOf(u)}, {at::ones({}, opts), at::ones({512, 512}, opts)},
        {edgeOf(x), edgeOf(w), edgeOf(u)}, "round " + std::to_string(round));
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace rpcjob::runtime::autograd
