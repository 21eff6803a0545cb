// Placement rules: which nodes, how many, all or nothing, and why not.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "rpcjob/planner/plan.h"
#include "test_support.h"

namespace rpcjob::planner {
namespace {

using ::testing::HasSubstr;
using namespace rpcjob::planner::testing;

std::set<std::string> nodesOf(const Plan& plan) {
  std::set<std::string> nodes;
  for (const auto& w : plan.workers) nodes.insert(w.node);
  return nodes;
}

TEST(Placement, PackUsesFewestNodesLargestFirst) {
  const Plan plan = planJob(job({group("w", 4, 2)}),
                            cluster({gpuNode("a", 4), gpuNode("b", 8), gpuNode("c", 8)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(nodesOf(plan), std::set<std::string>{"b"});  // most free, then name
}

TEST(Placement, PackSpillsOverInOrder) {
  const Plan plan = planJob(job({group("w", 3, 4)}), cluster({gpuNode("a", 8), gpuNode("b", 8)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.workers[0].node, "a");
  EXPECT_EQ(plan.workers[1].node, "a");
  EXPECT_EQ(plan.workers[2].node, "b");
}

TEST(Placement, SpreadUsesOneNodePerWorker) {
  api::RpcJob j = job({group("w", 3, 1)});
  j.spec.placement.policy = api::PlacementPolicy::Spread;
  const Plan plan = planJob(j, cluster({gpuNode("a", 8), gpuNode("b", 8), gpuNode("c", 8)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(nodesOf(plan), (std::set<std::string>{"a", "b", "c"}));
}

TEST(Placement, RetriesLargestFirstWhenNaturalOrderFails) {
  // Natural order puts the 1-GPU master on the 4-GPU node, leaving no room for the
  // 4-GPU worker; largest first fits both.
  const Plan plan = planJob(job({group("master", 1, 1), group("big", 1, 4)}),
                            cluster({gpuNode("a", 4), gpuNode("b", 1)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.workers[0].name, "master");  // rank 0 still the first group's worker
  EXPECT_EQ(plan.workers[0].node, "b");
}

TEST(Placement, PinnedWorkersStayWhereTheyRunAndTheRestFillAround) {
  // From scratch Pack would put both workers on "z" (most free GPUs).
  const ClusterView c = cluster({gpuNode("a", 2), gpuNode("b", 2), gpuNode("z", 16)});
  PlanOptions o;
  o.pinned = {{"w0", "a"}};
  const Plan plan = planJob(job({group("w", 3, 1)}), c, o);
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.workers[0].name, "w0");
  EXPECT_EQ(plan.workers[0].node, "a");
  EXPECT_EQ(plan.workers[1].node, "a") << "Pack fills the pinned node first";
  EXPECT_EQ(plan.workers[2].node, "z");
  // Everything pinned: the same plan as the one the pods came from, whatever
  // the cluster now prefers.
  o.pinned = {{"w0", "b"}, {"w1", "b"}, {"w2", "a"}};
  const Plan same = planJob(job({group("w", 3, 1)}), c, o);
  ASSERT_TRUE(same.planned()) << same.message;
  EXPECT_EQ(nodesOf(same), (std::set<std::string>{"a", "b"}));
  // A pinned node that left the cluster: no plan, saying which.
  o.pinned = {{"w", "gone"}};  // a group of one: the worker is "w"
  const Plan lost = planJob(job({group("w", 1, 1)}), c, o);
  EXPECT_FALSE(lost.planned());
  EXPECT_THAT(lost.message, HasSubstr("gone"));
}

TEST(Placement, SubtractsWhatRunningPodsUse) {
  ClusterView c = cluster({gpuNode("a", 8), gpuNode("b", 8)});
  c.used["a"].gpus = 7;
  const Plan plan = planJob(job({group("w", 2, 2)}), c);
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(nodesOf(plan), std::set<std::string>{"b"});
}

TEST(Placement, HonoursNodeSelectorTaintsAndReadiness) {
  Node labelled = gpuNode("labelled", 2);
  labelled.labels["gpu"] = "a100";
  Node tainted = gpuNode("tainted", 8);
  tainted.labels["gpu"] = "a100";
  tainted.taints.push_back({"dedicated", "ml", "NoSchedule"});
  Node down = gpuNode("down", 8);
  down.labels["gpu"] = "a100";
  down.ready = false;
  Node cordoned = gpuNode("cordoned", 8);
  cordoned.labels["gpu"] = "a100";
  cordoned.unschedulable = true;
  const ClusterView c = cluster({gpuNode("plain", 8), labelled, tainted, down, cordoned});

  api::RpcJob j = job({group("w", 1, 2)});
  j.spec.workers[0].podTemplate.nodeSelector["gpu"] = "a100";
  Plan plan = planJob(j, c);
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(plan.workers[0].node, "labelled");

  j.spec.workers[0].replicas = 2;  // the second needs the tainted node
  plan = planJob(j, c);
  EXPECT_EQ(plan.outcome, PlanOutcome::Unschedulable);
  EXPECT_TRUE(plan.workers.empty());
  EXPECT_TRUE(plan.assignment.workers.empty());
  EXPECT_THAT(plan.message, HasSubstr("group 'w' needs 2 more nvidia.com/gpu on nodes with "
                                      "gpu=a100 (4 for 2 workers); free: labelled: 2"));

  j.spec.workers[0].podTemplate.tolerations.push_back({"dedicated", "Equal", "ml", "NoSchedule"});
  plan = planJob(j, c);
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(nodesOf(plan), (std::set<std::string>{"tainted"}));
}

TEST(Placement, PreferNoScheduleIsNotAFilter) {
  Node n = gpuNode("a", 1);
  n.taints.push_back({"soft", "", "PreferNoSchedule"});
  EXPECT_TRUE(planJob(job({group("w", 1, 1)}), cluster({n})).planned());
}

TEST(Placement, RequiredNodeAffinity) {
  Node a = gpuNode("a", 8);
  a.labels["zone"] = "east";
  Node b = gpuNode("b", 8);
  b.labels["zone"] = "west";
  b.labels["spot"] = "true";
  Node c = gpuNode("c", 8);
  c.labels["zone"] = "west";
  api::RpcJob j = job({group("w", 1, 1)});
  api::NodeSelectorTerm term;
  term.matchExpressions.push_back({"zone", api::SelectorOperator::NotIn, {"east"}});
  term.matchExpressions.push_back({"spot", api::SelectorOperator::DoesNotExist, {}});
  j.spec.workers[0].podTemplate.requiredNodeAffinity.push_back(term);
  const Plan plan = planJob(j, cluster({a, b, c}));
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(plan.workers[0].node, "c");
}

TEST(Placement, NamesWhatIsMissing) {
  Plan plan = planJob(job({group("w", 1, 8)}), cluster({gpuNode("a", 4), gpuNode("b", 2)}));
  EXPECT_EQ(plan.outcome, PlanOutcome::Unschedulable);
  EXPECT_THAT(plan.message, HasSubstr("each 'w' worker needs 8 nvidia.com/gpu but no node of any "
                                      "ready node has that much free; free: a: 4, b: 2"));

  Node down = gpuNode("a", 8);
  down.ready = false;
  Node tainted = gpuNode("b", 8);
  tainted.taints.push_back({"gpu", "", "NoExecute"});
  plan = planJob(job({group("w", 1, 1)}), cluster({down, tainted}));
  EXPECT_THAT(plan.message, HasSubstr("group 'w': no node can run it (any ready node): a: not "
                                      "ready; b: taint gpu:NoExecute"));

  // Each group fits alone; together they do not.
  plan = planJob(job({group("m", 1, 3), group("w", 1, 3)}), cluster({gpuNode("a", 4)}));
  EXPECT_THAT(plan.message,
              HasSubstr("the job needs 2 more nvidia.com/gpu in all (6); free: a: 4"));
}

TEST(Placement, CpuAndMemoryCount) {
  api::RpcJob j = job({group("w", 3, 0)});
  api::Container c;
  c.cpuRequest = "40";
  c.memoryRequest = "1Gi";
  j.spec.workers[0].podTemplate.containers.push_back(c);
  const Plan plan = planJob(j, cluster({gpuNode("a", 0), gpuNode("b", 0)}));  // 64 cpu each
  EXPECT_EQ(plan.outcome, PlanOutcome::Unschedulable);
  EXPECT_THAT(plan.message, HasSubstr("enough is free in total, but not in pieces"));
  j.spec.workers[0].replicas = 5;
  EXPECT_THAT(planJob(j, cluster({gpuNode("a", 0), gpuNode("b", 0)})).message,
              HasSubstr("group 'w' needs 72 more cpu"));
}

TEST(Placement, InvalidJobsAreNotPlanned) {
  const Plan plan = planJob(job({group("w", 0, 1)}), cluster({gpuNode("a", 8)}));
  EXPECT_EQ(plan.outcome, PlanOutcome::Invalid);
  ASSERT_EQ(plan.errors.size(), 1u);
  EXPECT_EQ(plan.errors[0].path, "spec.workers[0].replicas");
}

TEST(Placement, EmptyCluster) {
  const Plan plan = planJob(job({group("w", 1, 0)}), ClusterView{});
  EXPECT_EQ(plan.outcome, PlanOutcome::Unschedulable);
  EXPECT_THAT(plan.message, HasSubstr("the cluster has no nodes"));
}

}  // namespace
}  // namespace rpcjob::planner
