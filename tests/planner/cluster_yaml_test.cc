#include "rpcjob/planner/cluster_yaml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace rpcjob::planner {
namespace {

using ::testing::HasSubstr;

TEST(ClusterYaml, ReadsTheDocumentedFormat) {
  const ClusterParseResult r = parseClusterYaml(R"(nodes:
  - name: gpu-a
    gpus: 8
    cpu: "96"
    memory: 512Gi
    rdma: true
    nvlink: true
    labels: {zone: east}
    taints: [{key: dedicated, value: ml, effect: NoSchedule}]
    used: {gpus: 2, cpu: 500m, memory: 1Gi}
  - name: cpu-b
    ready: false
    unschedulable: true
    rdmaHca: 4
)");
  ASSERT_TRUE(r.ok()) << api::formatErrors(r.errors);
  ASSERT_EQ(r.cluster.nodes.size(), 2u);
  const Node& a = r.cluster.nodes[0];
  EXPECT_EQ(a.allocatable.gpus, 8);
  EXPECT_EQ(a.allocatable.cpuMilli, 96000);
  EXPECT_EQ(a.allocatable.memoryBytes, int64_t{512} << 30);
  EXPECT_TRUE(a.hasRdma());
  EXPECT_TRUE(a.hasNvlink());
  EXPECT_EQ(a.labels.at("zone"), "east");
  EXPECT_EQ(a.taints[0].effect, "NoSchedule");
  EXPECT_EQ(r.cluster.freeOn(a).gpus, 6);
  EXPECT_EQ(r.cluster.freeOn(a).cpuMilli, 95500);
  const Node& b = r.cluster.nodes[1];
  EXPECT_EQ(b.allocatable.gpus, 0);
  EXPECT_EQ(b.allocatable.cpuMilli, 64000);  // default
  EXPECT_FALSE(b.ready);
  EXPECT_TRUE(b.unschedulable);
  EXPECT_TRUE(b.hasRdma());  // from rdma/hca
}

TEST(ClusterYaml, ErrorsHavePathsAndLines) {
  const ClusterParseResult r = parseClusterYaml(R"(nodes:
  - name: a
    gpus: -1
    colour: blue
  - name: a
    memory: lots
    taints: [{key: k, effect: Sometimes}]
)");
  const std::string e = api::formatErrors(r.errors);
  EXPECT_THAT(e, HasSubstr("nodes[0].gpus (line 3): expected a whole number >= 0"));
  EXPECT_THAT(e, HasSubstr("nodes[0].colour (line 4): unknown field"));
  EXPECT_THAT(e, HasSubstr("nodes[1].memory (line 6): expected a quantity"));
  EXPECT_THAT(e, HasSubstr("nodes[1].taints[0].effect (line 7): must be NoSchedule"));
  EXPECT_THAT(e, HasSubstr("nodes[1].name (line 5): duplicate node name 'a'"));
  EXPECT_EQ(r.errors.size(), 5u) << e;
}

TEST(ClusterYaml, NeedsANodeList) {
  EXPECT_FALSE(parseClusterYaml("{}").ok());
  EXPECT_FALSE(parseClusterYaml("nodes: [").ok());
  EXPECT_TRUE(parseClusterYaml("nodes: []").ok());
}

TEST(LocalCluster, OneReadyNode) {
  const ClusterView c = localCluster(2, 8000, 1 << 30);
  ASSERT_EQ(c.nodes.size(), 1u);
  EXPECT_EQ(c.nodes[0].name, "localhost");
  EXPECT_TRUE(c.nodes[0].ready);
  EXPECT_EQ(c.freeOn(c.nodes[0]).gpus, 2);
}

}  // namespace
}  // namespace rpcjob::planner
