// Distributed autograd on CUDA (CUDA build, run by tests/gpu/run-all.sh): the
// recipe's split with both halves on GPUs -- cuda:0 here, cuda:1 in the worker,
// or cuda:0 in both processes on a one-GPU machine -- gives the gradients and,
// through DistributedOptimizer, the weights of the same model run in this one
// process; the worker has no device map of its own (the backward pass sends
// gradients back with the inverse of ours), and no context outlives its scope.
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <thread>

#include "gpu_autograd_functions.h"
#include "gpu_pair.h"
#include "rpcjob/runtime/dist_optimizer.h"

using namespace rpcjob;
namespace dist = runtime::dist_autograd;

namespace {

std::string peerDevice() {
  return c10::cuda::device_count() > 1 ? "cuda:1" : "cuda:0";
}

struct Split {
  gpu::Pair pair{{{"cuda:0", peerDevice()}}, "", "", gpu::registerGpuAutogradFunctions};
  at::Tensor lw, lb;  // the local half, on cuda:0
  explicit Split(int64_t n) {
    pair.start();
    std::tie(lw, lb) = gpu::gpuLinearParams(n, n, 1, c10::Device("cuda:0"));
    pair.rt().rpcSync("w1", "gag.make", {peerDevice(), n, n, int64_t{2}, false});
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = at::tanh(at::addmm(lb, x, lw.t()));
    return pair.rt().rpcSync("w1", "gag.forward", {h}).toTensor();
  }
};

void expectClose(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  EXPECT_TRUE(at::allclose(actual.cpu(), expected.cpu(), 1e-4, 1e-5)) << what;
}

void expectNoContexts(runtime::Runtime& rt) {
  EXPECT_EQ(rt.rpcSync("w1", runtime::kBuiltinAutogradContexts, {}).toListRef().size(), 0u);
  EXPECT_EQ(rt.rpcSync("driver", runtime::kBuiltinAutogradContexts, {}).toListRef().size(), 0u);
}

TEST(DistAutogradGpu, SplitGradientsEqualLocalOnes) {
  Split s(256);
  auto& rt = s.pair.rt();
  at::Tensor x = at::randn({64, 256}, at::TensorOptions().device(at::kCUDA, 0));
  {
    dist::Context ctx(rt);
    at::Tensor y = s.forward(x);
    EXPECT_TRUE(y.is_cuda());
    EXPECT_TRUE(y.requires_grad());
    dist::backward(rt, ctx.id(), {y.sum()});

    auto [rw, rb] = gpu::gpuLinearParams(256, 256, 2, c10::Device("cuda:0"));
    auto [lw, lb] = gpu::gpuLinearParams(256, 256, 1, c10::Device("cuda:0"));
    at::Tensor ref = at::tanh(at::addmm(rb, at::tanh(at::addmm(lb, x, lw.t())), rw.t())).sum();
    auto g = torch::autograd::grad({ref}, {lw, lb, rw, rb});
    expectClose(dist::gradientOf(rt, ctx.id(), s.lw), g[0], "local weight");
    expectClose(dist::gradientOf(rt, ctx.id(), s.lb), g[1], "local bias");
    EXPECT_TRUE(dist::gradientOf(rt, ctx.id(), s.lw).is_cuda());
    auto remote = rt.rpcSync("w1", "gag.grads", {ctx.id()}).toTuple();
    expectClose(remote->elements()[0].toTensor(), g[2], "remote weight");
    expectClose(remote->elements()[1].toTensor(), g[3], "remote bias");
  }
  expectNoContexts(rt);
}

TEST(DistAutogradGpu, ConcurrentContextsOnTheGpu) {
  Split s(128);
  auto& rt = s.pair.rt();
  std::vector<at::Tensor> xs, got(3);
  for (int i = 0; i < 3; ++i)
    xs.push_back(at::randn({8, 128}, at::TensorOptions().device(at::kCUDA, 0)));
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      dist::Context ctx(rt);
      dist::backward(rt, ctx.id(), {s.forward(xs[i]).sum().mul(i + 1)});
      got[i] = dist::gradientOf(rt, ctx.id(), s.lw).cpu();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) {
    auto [rw, rb] = gpu::gpuLinearParams(128, 128, 2, c10::Device("cuda:0"));
    auto [lw, lb] = gpu::gpuLinearParams(128, 128, 1, c10::Device("cuda:0"));
    at::Tensor ref =
        at::tanh(at::addmm(rb, at::tanh(at::addmm(lb, xs[i], lw.t())), rw.t())).sum().mul(i + 1);
    expectClose(got[i], torch::autograd::grad({ref}, {lw})[0], "thread " + std::to_string(i));
  }
  expectNoContexts(rt);
}

TEST(DistAutogradGpu, SgdThroughDistributedOptimizerEqualsLocalTraining) {
  Split s(64);
  auto& rt = s.pair.rt();
  std::vector<runtime::RRef> params{rt.remote("w1", "gag.param", {int64_t{0}}),
                                    rt.remote("w1", "gag.param", {int64_t{1}})};
  auto [lw, lb] = gpu::gpuLinearParams(64, 64, 1, c10::Device("cuda:0"));
  auto [rw, rb] = gpu::gpuLinearParams(64, 64, 2, c10::Device("cuda:0"));
  torch::optim::SGD local({rw, rb}, torch::optim::SGDOptions(0.1).momentum(0.5));
  {
    runtime::DistributedOptimizer opt(rt, params, torch::optim::SGDOptions(0.1).momentum(0.5));
    for (int step = 0; step < 3; ++step) {
      at::Tensor x = at::randn({16, 64}, at::TensorOptions().device(at::kCUDA, 0));
      {
        dist::Context ctx(rt);
        dist::backward(rt, ctx.id(), {s.forward(x).pow(2).sum()});
        opt.step(ctx.id());
      }
      local.zero_grad();
      at::Tensor h = at::tanh(at::addmm(lb, x, lw.t())).detach();
      at::tanh(at::addmm(rb, h, rw.t())).pow(2).sum().backward();
      local.step();
    }
  }
  auto w = rt.rpcSync("w1", "gag.weights", {}).toTuple();
  expectClose(w->elements()[0].toTensor(), rw.detach(), "remote weight");
  expectClose(w->elements()[1].toTensor(), rb.detach(), "remote bias");
  params.clear();
  expectNoContexts(rt);
}

}  // namespace

int main(int argc, char** argv) {
  gpu::runWorkerIfAsked(gpu::registerGpuAutogradFunctions);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
