// 16 workers (the driver and 15 processes), each calling all the others at once.
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>

#include "cluster.h"

namespace rpcjob::testing {
namespace {

TEST(AllToAllTest, SixteenWorkersCallEachOther) {
  runtime::RuntimeOptions options;
  options.startTimeout = std::chrono::seconds(120);  // 15 processes load libtorch on 2 cores
  Cluster cluster(15, options);
  runtime::Runtime& rt = cluster.driver();
  std::vector<runtime::Future> futures;
  for (const auto& w : rt.workers()) {
    if (w.rank != 0) futures.push_back(rt.rpcAsync(w.name, "all_to_all", {}));
  }
  for (auto& f : futures) EXPECT_EQ(f.value().toInt(), 15);
  for (int code : cluster.shutdown(std::chrono::seconds(60))) EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace rpcjob::testing
