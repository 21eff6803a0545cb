#include "rpcjob/operator/backoff.h"

#include <gtest/gtest.h>

namespace rpcjob::kube {
namespace {

using std::chrono::milliseconds;

TEST(Backoff, WithoutJitterGrowsByTheMultiplierUpToMax) {
  Backoff b(Backoff::Options()
                .setInitial(milliseconds(100))
                .setMultiplier(2)
                .setJitter(0)
                .setMax(milliseconds(1000))
                .setSeed(1));
  std::vector<int64_t> got;
  for (int i = 0; i < 7; ++i) got.push_back(b.next().count());
  EXPECT_EQ(got, (std::vector<int64_t>{100, 200, 400, 800, 1000, 1000, 1000}));
  b.reset();
  EXPECT_EQ(b.next().count(), 100);
}

TEST(Backoff, SameSeedSameSequence) {
  auto opts = Backoff::Options().setInitial(milliseconds(1000)).setSeed(42);
  Backoff a(opts), b(opts), c(Backoff::Options(opts).setSeed(43));
  bool differs = false;
  for (int i = 0; i < 20; ++i) {
    auto x = a.next();
    EXPECT_EQ(x, b.next());
    differs |= x != c.next();
  }
  EXPECT_TRUE(differs);
}

TEST(Backoff, JitterStaysWithinItsBand) {
  const double jitter = 0.2;
  Backoff b(Backoff::Options()
                .setInitial(milliseconds(1000))
                .setMultiplier(1.6)
                .setJitter(jitter)
                .setMax(milliseconds(120000))
                .setSeed(7));
  double base = 1000;
  for (int i = 0; i < 50; ++i) {
    double d = static_cast<double>(b.next().count());
    EXPECT_GE(d, base * (1 - jitter) - 1) << "attempt " << i;
    EXPECT_LE(d, base * (1 + jitter)) << "attempt " << i;
    base = std::min(base * 1.6, 120000.0);
  }
}

TEST(Backoff, JitterSpreadsDelays) {
  Backoff b(
      Backoff::Options().setInitial(milliseconds(1000)).setMultiplier(1).setJitter(0.5).setSeed(9));
  int64_t lo = 1 << 30, hi = 0;
  for (int i = 0; i < 200; ++i) {
    int64_t d = b.next().count();
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_LT(lo, 600);
  EXPECT_GT(hi, 1400);
}

}  // namespace
}  // namespace rpcjob::kube
