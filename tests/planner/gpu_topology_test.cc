// GPU topology: recorded `nvidia-smi topo -m` matrices of 1, 2, 4 and 8 GPU hosts,
// the order GPUs are handed out in, and local plans that give neighbouring ranks
// NVLink-joined GPUs. No GPU needed.
//
// Fixtures (tests/planner/topologies/): h200-1gpu.txt was recorded on the lent
// one-H200 machine (2026-11-24, escapes included); the others are written in the
// same format from the hosts' documented layouts: the 2 x H200 kind (NV18, GPU.md),
// a 4-GPU PCIe host with NVLink bridges 0-2 and 1-3, the DGX-1 (V100) hybrid
// cube-mesh (NV1/NV2, half the pairs over SYS), and an 8-GPU NVSwitch HGX (NV18
// everywhere).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/planner/gpu_topology.h"
#include "rpcjob/planner/plan.h"
#include "test_support.h"

namespace rpcjob::planner {
namespace {

using ::testing::HasSubstr;
using namespace rpcjob::planner::testing;

GpuTopology recorded(const std::string& name) {
  std::ifstream in(std::string(RPCJOB_SOURCE_DIR) + "/tests/planner/topologies/" + name);
  std::stringstream text;
  text << in.rdbuf();
  std::string error;
  auto t = parseTopoMatrix(text.str(), error);
  EXPECT_TRUE(t.has_value()) << name << ": " << error;
  if (!t) return {};
  t->source = name;
  return *t;
}

// The most consecutive NVLink-joined pairs any order of `count` GPUs can have
// (brute force, independent of neighbourOrder's search).
int bestPossible(const GpuTopology& t, int count) {
  std::vector<int> all(t.gpus);
  for (int i = 0; i < t.gpus; ++i) all[i] = i;
  int best = 0;
  do {
    std::vector<int> prefix(all.begin(), all.begin() + count);
    best = std::max(best, nvlinkNeighbours(t, prefix));
  } while (std::next_permutation(all.begin(), all.end()));
  return best;
}

TEST(GpuTopology, ParsesRecordedMatrices) {
  EXPECT_EQ(recorded("h200-1gpu.txt").gpus, 1);
  const GpuTopology two = recorded("h200-2gpu-nv18.txt");
  ASSERT_EQ(two.gpus, 2);
  EXPECT_EQ(two.links[0][1].nvlinks, 18);
  const GpuTopology four = recorded("pcie-4gpu-bridged.txt");
  ASSERT_EQ(four.gpus, 4);  // NIC0 is not a GPU
  EXPECT_TRUE(four.nvlinkBetween(0, 2));
  EXPECT_FALSE(four.nvlinkBetween(0, 1));
  EXPECT_EQ(four.links[0][1].path, "SYS");
  const GpuTopology dgx1 = recorded("dgx1-v100-8gpu.txt");
  ASSERT_EQ(dgx1.gpus, 8);
  EXPECT_EQ(dgx1.links[0][3].nvlinks, 2);
  EXPECT_FALSE(dgx1.nvlinkBetween(0, 5));
  EXPECT_EQ(recorded("hgx-h200-8gpu-nvswitch.txt").gpus, 8);
}

TEST(GpuTopology, RejectsWhatIsNotAMatrix) {
  std::string error;
  EXPECT_FALSE(parseTopoMatrix("hello\n", error));
  EXPECT_THAT(error, HasSubstr("nvidia-smi topo -m"));
  EXPECT_FALSE(parseTopoMatrix("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV4\t X \n", error));
  EXPECT_THAT(error, HasSubstr("disagree"));
  EXPECT_FALSE(parseTopoMatrix("\tGPU0\tGPU1\nGPU0\t X \tWARP\nGPU1\tSYS\t X \n", error));
  EXPECT_THAT(error, HasSubstr("unknown link 'WARP'"));
  EXPECT_FALSE(parseTopoMatrix("\tGPU0\tGPU1\nGPU0\t X \tSYS\n", error));
  EXPECT_THAT(error, HasSubstr("no row for GPU1"));
  EXPECT_FALSE(parseTopoMatrix("\tGPU0\tGPU1\nGPU0\t X\n", error));
  EXPECT_THAT(error, HasSubstr("1 entries, 2 GPUs"));
}

TEST(GpuTopology, OrderJoinsNeighboursByNvlinkWheneverPossible) {
  for (const char* name : {"h200-1gpu.txt", "h200-2gpu-nv18.txt", "pcie-4gpu-bridged.txt",
                           "dgx1-v100-8gpu.txt", "hgx-h200-8gpu-nvswitch.txt"}) {
    const GpuTopology t = recorded(name);
    for (int count = 0; count <= t.gpus; ++count) {
      const std::vector<int> order = neighbourOrder(t, count);
      ASSERT_EQ(static_cast<int>(order.size()), count) << name;
      EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), order.size()) << name;
      EXPECT_EQ(nvlinkNeighbours(t, order), bestPossible(t, count)) << name << " " << count;
    }
  }
}

TEST(GpuTopology, OrdersOnKnownHosts) {
  // All pairs alike: nothing to gain, the natural order stays.
  EXPECT_EQ(neighbourOrder(recorded("hgx-h200-8gpu-nvswitch.txt"), 8),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(neighbourOrder(recorded("h200-2gpu-nv18.txt"), 2), (std::vector<int>{0, 1}));
  // Bridges 0-2 and 1-3: two workers get a bridged pair, four get both bridges.
  const GpuTopology four = recorded("pcie-4gpu-bridged.txt");
  EXPECT_EQ(neighbourOrder(four, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(neighbourOrder(four, 4), (std::vector<int>{0, 2, 1, 3}));
  // The cube-mesh has a path over NVLink through all 8, and prefers NV2 hops.
  const GpuTopology dgx1 = recorded("dgx1-v100-8gpu.txt");
  EXPECT_EQ(nvlinkNeighbours(dgx1, neighbourOrder(dgx1, 8)), 7);
  EXPECT_EQ(neighbourOrder(dgx1, 2), (std::vector<int>{0, 3}));  // NV2 beats NV1
  // Unknown topology: the natural order.
  EXPECT_EQ(neighbourOrder(GpuTopology{}, 3), (std::vector<int>{0, 1, 2}));
}

TEST(GpuTopology, DescribedForPlans) {
  EXPECT_EQ(describeTopology(recorded("h200-1gpu.txt")), "1 GPU(s) (h200-1gpu.txt)");
  EXPECT_EQ(describeTopology(recorded("pcie-4gpu-bridged.txt")),
            "4 GPU(s) (pcie-4gpu-bridged.txt): NVLink 0-2 NV4, 1-3 NV4; 4 pair(s) over PCIe only");
  EXPECT_EQ(describeTopology(GpuTopology{}), "unknown");
}

ClusterView localWith(const GpuTopology& t) {
  ClusterView c = localCluster(t.gpus, 64000, int64_t{64} << 30);
  c.nodes[0].gpuTopology = t;
  return c;
}

PlanOptions localRun() {
  PlanOptions o;
  o.target = Target::Local;
  return o;
}

TEST(GpuTopology, LocalPlanGivesNeighboursNvlinkJoinedGpus) {
  // Master and shard on a bridged 4-GPU host: GPUs 0 and 2, mapped to each other.
  const Plan plan = planJob(job({group("master", 1, 1), group("shard", 1, 1)}),
                            localWith(recorded("pcie-4gpu-bridged.txt")), localRun());
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.workers[0].gpus, std::vector<int>{0});
  EXPECT_EQ(plan.workers[1].gpus, std::vector<int>{2});
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[0].name).at("shard").at("cuda:0"),
            "cuda:2");
  EXPECT_THAT(plan.notes, ::testing::Contains(HasSubstr("NVLink 0-2 NV4, 1-3 NV4")));
  EXPECT_THAT(plan.notes, ::testing::Contains(HasSubstr("GPUs by rank 0,2")));
}

TEST(GpuTopology, LocalPlanOnTheCubeMeshChainsEightRanksOverNvlink) {
  const GpuTopology dgx1 = recorded("dgx1-v100-8gpu.txt");
  const Plan plan = planJob(job({group("stage", 8, 1)}), localWith(dgx1), localRun());
  ASSERT_TRUE(plan.planned()) << plan.message;
  for (std::size_t r = 1; r < plan.workers.size(); ++r) {
    EXPECT_TRUE(dgx1.nvlinkBetween(plan.workers[r - 1].gpus[0], plan.workers[r].gpus[0])) << r;
  }
}

TEST(GpuTopology, TwoGpuWorkersGetAJoinedPair) {
  const Plan plan =
      planJob(job({group("w", 2, 2)}), localWith(recorded("pcie-4gpu-bridged.txt")), localRun());
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.workers[0].gpus, (std::vector<int>{0, 2}));
  EXPECT_EQ(plan.workers[1].gpus, (std::vector<int>{1, 3}));
}

TEST(GpuTopology, KubernetesPlansOnlyShowIt) {
  ClusterView c = cluster({gpuNode("a", 4)});
  c.nodes[0].gpuTopology = recorded("pcie-4gpu-bridged.txt");
  const Plan plan = planJob(job({group("w", 2, 1)}), c);
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.workers[1].gpus, std::vector<int>{0});  // pod-relative, its own pod
  EXPECT_THAT(plan.notes, ::testing::Contains(HasSubstr("GPU topology of a")));
}

}  // namespace
}  // namespace rpcjob::planner
