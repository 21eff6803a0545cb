#include "rpcjob/api/quantity.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace rpcjob::api {
namespace {

int64_t milli(const std::string& text) {
  const auto q = parseQuantity(text);
  EXPECT_TRUE(q.has_value()) << text;
  return q ? q->milli : -999;
}

TEST(Quantity, DecimalSuffixes) {
  EXPECT_EQ(milli("500m"), 500);
  EXPECT_EQ(milli("2"), 2000);
  EXPECT_EQ(milli("1.5"), 1500);
  EXPECT_EQ(milli("1k"), 1000000);
  EXPECT_EQ(milli("3M"), 3000000000LL);
  EXPECT_EQ(milli("1G"), 1000000000000LL);
  EXPECT_EQ(milli("0"), 0);
}

TEST(Quantity, BinarySuffixes) {
  EXPECT_EQ(parseQuantity("1Ki")->value(), 1024);
  EXPECT_EQ(parseQuantity("512Mi")->value(), 512LL * 1024 * 1024);
  EXPECT_EQ(parseQuantity("1Gi")->value(), 1024LL * 1024 * 1024);
  EXPECT_EQ(parseQuantity("1.5Gi")->value(), 1536LL * 1024 * 1024);
}

TEST(Quantity, Exponents) {
  EXPECT_EQ(milli("1e3"), 1000000);
  EXPECT_EQ(milli("1E3"), 1000000);
  EXPECT_EQ(milli("25e-1"), 2500);
  EXPECT_EQ(milli("1e+2"), 100000);
}

TEST(Quantity, RoundsUpLikeKubernetes) {
  EXPECT_EQ(milli("1n"), 1);  // 0.000001 m rounds up to 1m
  EXPECT_EQ(milli("0.0001"), 1);
  EXPECT_EQ(parseQuantity("100m")->value(), 1);
  EXPECT_EQ(parseQuantity("2")->value(), 2);
}

TEST(Quantity, Sign) {
  EXPECT_EQ(milli("-2"), -2000);
  EXPECT_EQ(milli("+2"), 2000);
}

TEST(Quantity, SaturatesInsteadOfOverflowing) {
  EXPECT_EQ(milli("100Ei"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(milli("123456789012345678901234567890"), std::numeric_limits<int64_t>::max());
}

TEST(Quantity, RejectsMalformed) {
  for (const char* bad :
       {"", "m", "1.2.3", "1x", "1mi", "Gi", "1 Gi", "1e", "1e1234", "--1", "abc", "1KiB"}) {
    EXPECT_FALSE(parseQuantity(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace rpcjob::api
