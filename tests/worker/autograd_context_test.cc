// A distributed autograd context's gradients (worker/src/autograd/context.h):
// sums per leaf, and on CUDA their order by stream: a reader on another stream
// than the accumulation's waits for it, and so does a second accumulation.
// CPU here; the CUDA cases run on the GPU machine (tests/gpu/run-all.sh test).
#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include "autograd/context.h"

namespace rpcjob::runtime::autograd {
namespace {

TEST(AutogradContext, GradientsOfALeafAreSummed) {
  ContextState ctx(7);
  at::Tensor a = at::zeros({3}), b = at::zeros({2});
  ctx.accumulate(a, at::full({3}, 1.5));
  ctx.accumulate(b, at::full({2}, 4.0));
  ctx.accumulate(a, at::full({3}, 2.0));
  EXPECT_TRUE(at::equal(ctx.gradientOf(a), at::full({3}, 3.5)));
  EXPECT_TRUE(at::equal(ctx.gradientOf(b), at::full({2}, 4.0)));
  EXPECT_FALSE(ctx.gradientOf(at::zeros({3})).defined());  // another tensor: none
  EXPECT_EQ(ctx.gradients().size(), 2u);
}

// Enqueues tens of milliseconds of work on the current stream and returns a
// gradient of `n` entries, all `value`, computed after it.
at::Tensor lateGradient(int64_t n, double value) {
  at::Tensor m = at::eye(n, at::TensorOptions().device(at::kCUDA));
  at::Tensor slow = m;
  for (int i = 0; i < 40; ++i) slow = slow.matmul(m);  // stays the identity
  return slow.diagonal().mul(value);
}

TEST(AutogradContext, CudaReadersOnAnotherStreamWaitForTheAccumulation) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA";
  const c10::Device device(c10::DeviceType::CUDA, 0);
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream side = impl.getStreamFromGlobalPool(device);
  const int64_t n = 4096;
  // Several rounds with their own values: memory the allocator hands out again
  // cannot pass for a gradient that is not there yet.
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    ContextState ctx(round + 1);
    at::Tensor leaf = at::zeros({n}, at::TensorOptions().device(device));
    const double first = 3 + round, second = 0.5;
    {
      c10::StreamGuard onSide(side);  // as the pool thread that ran a backward pass
      c10::Event made(c10::DeviceType::CUDA);
      made.record(impl.getDefaultStream(device));
      made.block(side);
      ctx.accumulate(leaf, lateGradient(n, first));
    }
    // The default stream, while the side stream still computes: a second
    // gradient summed in, then read.
    ctx.accumulate(leaf, at::full({n}, second, at::TensorOptions().device(device)));
    at::Tensor read = ctx.gradientOf(leaf).to(at::kCPU);  // copied on the default stream
    EXPECT_TRUE(at::allclose(read, at::full({n}, first + second)))
        << "read " << read.min().item<double>() << " .. " << read.max().item<double>();
    impl.synchronizeStream(side);
  }
}

TEST(AutogradContext, CudaGradientsListWaitsToo) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA";
  const c10::Device device(c10::DeviceType::CUDA, 0);
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream side = impl.getStreamFromGlobalPool(device);
  ContextState ctx(42);
  at::Tensor leaf = at::zeros({4096}, at::TensorOptions().device(device));
  {
    c10::StreamGuard onSide(side);
    ctx.accumulate(leaf, lateGradient(4096, 11.0));
  }
  auto all = ctx.gradients();
  ASSERT_EQ(all.size(), 1u);
  at::Tensor read = all[0].second.to(at::kCPU);
  EXPECT_TRUE(at::allclose(read, at::full({4096}, 11.0)))
      << "read " << read.min().item<double>() << " .. " << read.max().item<double>();
  impl.synchronizeStream(side);
}

// A stream that waited once is not waited for again (context.h's waited_),
// but a new accumulation, on either stream, needs a new wait.
TEST(AutogradContext, CudaReadersWaitAgainAfterEachNewAccumulation) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA";
  const c10::Device device(c10::DeviceType::CUDA, 0);
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream side = impl.getStreamFromGlobalPool(device);
  const int64_t n = 4096;
  ContextState ctx(9);
  at::Tensor leaf = at::zeros({n}, at::TensorOptions().device(device));
  auto readOn = [&](const c10::Stream& stream) {
    c10::StreamGuard guard(stream);
    at::Tensor read = ctx.gradientOf(leaf).to(at::kCPU);  // copied on `stream`
    return std::make_pair(read.min().item<double>(), read.max().item<double>());
  };
  double sum = 0;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    {
      c10::StreamGuard onSide(side);
      ctx.accumulate(leaf, lateGradient(n, 1.0 + round));
    }
    sum += 1.0 + round;
    const c10::Stream main = impl.getDefaultStream(device);
    for (int again = 0; again < 2; ++again) {  // the second read is the cached one
      auto [lo, hi] = readOn(main);
      EXPECT_DOUBLE_EQ(lo, sum);
      EXPECT_DOUBLE_EQ(hi, sum);
    }
    // Now the other way: summed on the default stream, read on the side one.
    {
      c10::StreamGuard onMain(main);
      ctx.accumulate(leaf, lateGradient(n, 0.5));
    }
    sum += 0.5;
    auto [lo, hi] = readOn(side);
    EXPECT_DOUBLE_EQ(lo, sum);
    EXPECT_DOUBLE_EQ(hi, sum);
  }
  impl.synchronizeStream(side);
}

}  // namespace
}  // namespace rpcjob::runtime::autograd
