// spec.placement.workersPerGpu: N workers of a node (pod) share one GPU.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/planner/plan.h"
#include "test_support.h"

namespace rpcjob::planner {
namespace {

using ::testing::HasSubstr;
using namespace rpcjob::planner::testing;

api::RpcJob sharing(std::vector<api::WorkerGroup> groups, int workersPerGpu) {
  api::RpcJob j = job(std::move(groups));
  j.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  j.spec.placement.workersPerGpu = workersPerGpu;
  return j;
}

PlanOptions localRun() {
  PlanOptions o;
  o.target = Target::Local;
  return o;
}

TEST(GpuSharing, TheModelSplitRunsOnOneGpu) {
  const api::RpcJob j = sharing({group("master", 1, 1), group("shard", 1, 1)}, 2);
  const Plan plan = planJob(j, localCluster(1, 8000, int64_t{16} << 30), localRun());
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.workers[0].gpus, std::vector<int>{0});
  EXPECT_EQ(plan.workers[1].gpus, std::vector<int>{0});
  // cuda:X maps to cuda:X: the same physical GPU.
  const auto maps = deviceMapsOf(plan.assignment, "master");
  ASSERT_EQ(maps.count("shard"), 1u);
  EXPECT_EQ(maps.at("shard").at("cuda:0"), "cuda:0");
  EXPECT_THAT(plan.notes, ::testing::Contains(HasSubstr("workers master, shard share GPU 0")));
  // Without sharing the same job needs two GPUs.
  api::RpcJob exclusive = j;
  exclusive.spec.placement.workersPerGpu = 1;
  EXPECT_FALSE(planJob(exclusive, localCluster(1, 8000, int64_t{16} << 30), localRun()).planned());
}

TEST(GpuSharing, NeighbouringRanksShareInOrder) {
  const Plan plan =
      planJob(sharing({group("w", 5, 1)}, 2), localCluster(3, 8000, int64_t{16} << 30), localRun());
  ASSERT_TRUE(plan.planned()) << plan.message;
  std::vector<int> gpus;
  for (const auto& w : plan.workers) gpus.push_back(w.gpus.at(0));
  EXPECT_EQ(gpus, (std::vector<int>{0, 0, 1, 1, 2}));
}

TEST(GpuSharing, CapacityIsGpusTimesShares) {
  const auto c = [] { return localCluster(2, 64000, int64_t{64} << 30); };
  EXPECT_TRUE(planJob(sharing({group("w", 8, 1)}, 4), c(), localRun()).planned());
  const Plan tooMany = planJob(sharing({group("w", 9, 1)}, 4), c(), localRun());
  EXPECT_FALSE(tooMany.planned());
  EXPECT_EQ(tooMany.reason, "Unschedulable");
}

TEST(GpuSharing, PodsRequestWholeGpusAndCpuWorkersTakeNone) {
  // Kubernetes: one pod per node; 3 GPU workers at 2 per GPU ask for 2 GPUs.
  const Plan plan = planJob(sharing({group("w", 3, 1), group("cpu", 2, 0)}, 2),
                            cluster({gpuNode("a", 2), gpuNode("b", 8)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  ASSERT_EQ(plan.pods.size(), 1u);
  EXPECT_EQ(plan.pods[0].requests.gpus, 2);
  for (const auto& w : plan.workers) {
    if (w.group == "cpu") {
      EXPECT_TRUE(w.gpus.empty());
    }
  }
}

TEST(GpuSharing, InvalidWithoutSharedPods) {
  api::RpcJob j = sharing({group("w", 2, 1)}, 2);
  j.spec.placement.workersPerPod = api::WorkersPerPod::One;
  const Plan plan = planJob(j, cluster({gpuNode("a", 1)}));
  EXPECT_EQ(plan.outcome, PlanOutcome::Invalid);
  EXPECT_THAT(plan.message, HasSubstr("workersPerGpu"));
}

}  // namespace
}  // namespace rpcjob::planner
