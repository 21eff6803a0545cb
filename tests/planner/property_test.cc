// Invariants of the planner over many generated clusters and jobs (seeded, so every
// run checks the same cases):
//  - the same input gives the same plan;
//  - all or nothing: a plan places every worker, or none;
//  - GPUs (and cpu, memory) are never over-committed on any node;
//  - every worker runs on a node its group may use;
//  - ranks are 0..N-1 exactly once, rank 0 is the first group's first worker, and
//    the workers of a node have adjacent ranks;
//  - device indices are distinct within a pod (or machine) and within what it got;
//  - device maps are one-to-one and A's map to B inverted is B's map to A;
//  - the assignment is one every worker accepts (parseAssignment);
//  - on small cases, an exhaustive search agrees that Unschedulable means no
//    placement exists... or counts the cases where the greedy planner gives up on a
//    job that would fit (reported, and bounded).

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "rpcjob/api/names.h"
#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/planner/plan.h"
#include "rpcjob/planner/render.h"

namespace rpcjob::planner {
namespace {

// SplitMix64: the same numbers on every platform (std distributions are not).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  bool chance(int percent) { return below(100) < percent; }

 private:
  uint64_t state_;
};

struct Case {
  api::RpcJob job;
  ClusterView cluster;
  PlanOptions options;
};

Case generate(uint64_t seed) {
  Random r(seed);
  Case c;
  const int nodes = 1 + r.below(8);
  static const int kGpus[] = {0, 1, 2, 4, 8};
  for (int i = 0; i < nodes; ++i) {
    Node n;
    n.name = "node-" + std::string(1, static_cast<char>('a' + i));
    n.allocatable.gpus = kGpus[r.below(5)];
    n.allocatable.cpuMilli = 1000 * (1 + r.below(32));
    n.allocatable.memoryBytes = int64_t{1 + r.below(64)} << 30;
    n.labels["zone"] = r.chance(50) ? "east" : "west";
    if (r.chance(40)) n.labels[kRdmaLabel] = "true";
    if (r.chance(15)) n.allocatable.rdma = 8;
    if (r.chance(20)) n.taints.push_back({"dedicated", "ml", "NoSchedule"});
    n.ready = !r.chance(10);
    n.unschedulable = r.chance(5);
    if (r.chance(30)) {
      Resources& used = c.cluster.used[n.name];
      used.gpus = r.below(static_cast<int>(n.allocatable.gpus) + 1);
      used.cpuMilli = r.below(static_cast<int>(n.allocatable.cpuMilli) + 1);
    }
    c.cluster.nodes.push_back(n);
  }
  c.job.metadata.name = "job";
  c.job.metadata.namespaceName = "ns";
  const int groups = 1 + r.below(3);
  for (int g = 0; g < groups; ++g) {
    api::WorkerGroup group;
    group.name = "g" + std::to_string(g) + "x";
    group.replicas = 1 + r.below(5);
    group.gpusPerWorker = r.below(4);
    api::Container container;
    container.cpuRequest = std::to_string(100 * (1 + r.below(40))) + "m";
    container.memoryRequest = std::to_string(1 + r.below(4)) + "Gi";
    group.podTemplate.containers.push_back(container);
    if (r.chance(25)) group.podTemplate.nodeSelector["zone"] = "east";
    if (r.chance(50)) group.podTemplate.tolerations.push_back({"dedicated", "Equal", "ml", ""});
    if (r.chance(15)) {
      api::NodeSelectorTerm term;
      term.matchExpressions.push_back({"zone", api::SelectorOperator::NotIn, {"west"}});
      group.podTemplate.requiredNodeAffinity.push_back(term);
    }
    c.job.spec.workers.push_back(group);
  }
  c.job.spec.placement.policy =
      r.chance(50) ? api::PlacementPolicy::Pack : api::PlacementPolicy::Spread;
  c.job.spec.placement.workersPerPod =
      r.chance(50) ? api::WorkersPerPod::One : api::WorkersPerPod::Auto;
  if (r.chance(20)) c.job.spec.channels = {"cuda_ipc", "cuda_basic", "cma", "basic"};
  c.options.target = r.chance(20) ? Target::Local : Target::Kubernetes;
  return c;
}

bool eligible(const Node& node, const api::PodTemplate& t) {
  if (!node.ready || node.unschedulable) return false;
  for (const auto& [k, v] : t.nodeSelector) {
    if (!node.labels.count(k) || node.labels.at(k) != v) return false;
  }
  for (const auto& term : t.requiredNodeAffinity) {
    for (const auto& e : term.matchExpressions) {
      if (node.labels.count(e.key) && node.labels.at(e.key) == "west") return false;
    }
  }
  // Every generated taint is dedicated=ml:NoSchedule; every toleration tolerates it.
  return node.taints.empty() || !t.tolerations.empty();
}

// Exhaustive search: can the workers be placed at all?
bool fits(const std::vector<std::pair<Resources, const api::PodTemplate*>>& workers,
          std::size_t next, const ClusterView& c, std::vector<Resources>& free) {
  if (next == workers.size()) return true;
  for (std::size_t n = 0; n < c.nodes.size(); ++n) {
    if (!eligible(c.nodes[n], *workers[next].second) || !free[n].covers(workers[next].first))
      continue;
    free[n] -= workers[next].first;
    const bool ok = fits(workers, next + 1, c, free);
    free[n] += workers[next].first;
    if (ok) return true;
  }
  return false;
}

Resources demandOf(const api::WorkerGroup& g) {
  Resources d;
  d.gpus = g.gpusPerWorker;
  if (g.podTemplate.containers.empty()) return d;
  d.cpuMilli = std::stoll(g.podTemplate.containers[0].cpuRequest);  // "NNNm"
  d.memoryBytes = std::stoll(g.podTemplate.containers[0].memoryRequest) << 30;
  return d;
}

void checkPlanned(const Case& c, const Plan& plan) {
  const Assignment& a = plan.assignment;
  const int total = static_cast<int>(api::workerNames(c.job.spec).size());
  ASSERT_EQ(static_cast<int>(plan.workers.size()), total);
  ASSERT_EQ(a.worldSize(), total);
  EXPECT_EQ(a.workers[0].name, api::workerName(c.job.spec.workers[0], 0));

  std::map<std::string, Resources> placed;
  std::map<std::string, int> lastRankOnNode;
  std::map<std::string, std::set<int>> devicesInScope;
  std::map<std::string, const api::WorkerGroup*> groupOf;
  for (const auto& g : c.job.spec.workers) groupOf[g.name] = &g;
  std::string previousNode;
  std::set<std::string> finishedNodes;
  for (int rank = 0; rank < total; ++rank) {
    const WorkerPlacement& w = plan.workers[rank];
    EXPECT_EQ(w.rank, rank);
    EXPECT_EQ(a.workers[rank].rank, rank);
    EXPECT_EQ(a.workers[rank].name, w.name);
    const api::WorkerGroup& g = *groupOf.at(w.group);
    placed[w.node] += demandOf(g);
    const Node* node = nullptr;
    for (const auto& n : c.cluster.nodes) {
      if (n.name == w.node) node = &n;
    }
    ASSERT_NE(node, nullptr);
    EXPECT_TRUE(eligible(*node, g.podTemplate)) << w.name << " on " << w.node;
    // Adjacent ranks per node: once the ranks leave a node they never come back.
    if (w.node != previousNode) {
      EXPECT_FALSE(finishedNodes.count(w.node)) << "ranks on " << w.node << " are not adjacent";
      if (!previousNode.empty()) finishedNodes.insert(previousNode);
      previousNode = w.node;
    }
    EXPECT_EQ(static_cast<int>(w.gpus.size()), g.gpusPerWorker);
    const std::string scope = c.options.target == Target::Local ? w.node : w.pod;
    for (int gpu : w.gpus) EXPECT_TRUE(devicesInScope[scope].insert(gpu).second) << "device reused";
  }
  for (const auto& node : c.cluster.nodes) {
    const Resources free = c.cluster.freeOn(node);
    EXPECT_TRUE(free.covers(placed[node.name])) << "over-committed " << node.name;
  }
  // Each worker's row of device maps, as its runtime derives it.
  std::map<std::string, std::map<std::string, DeviceMap>> rows;
  for (const auto& w : a.workers) rows[w.name] = deviceMapsOf(a, w.name);
  for (const auto& w : a.workers) {
    for (const auto& [peer, map] : rows[w.name]) {
      std::set<std::string> targets;
      DeviceMap inverse;
      for (const auto& [from, to] : map) {
        EXPECT_TRUE(targets.insert(to).second) << "not one-to-one";
        inverse[to] = from;
        EXPECT_NE(std::find(w.gpus.begin(), w.gpus.end(), *parseDevice(from)), w.gpus.end());
      }
      const WorkerEntry* other = a.byName(peer);
      ASSERT_NE(other, nullptr);
      ASSERT_TRUE(rows[peer].count(w.name)) << "no map back from " << peer;
      EXPECT_EQ(rows[peer].at(w.name), inverse);
    }
  }
  const Assignment parsed = parseAssignment(toYaml(a));
  EXPECT_TRUE(parsed == a);
}

TEST(PlannerProperties, HoldOnGeneratedClusters) {
  constexpr int kCases = 600;
  int planned = 0;
  int unschedulable = 0;
  int missed = 0;  // feasible by exhaustive search, yet Unschedulable
  for (int seed = 0; seed < kCases; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Case c = generate(static_cast<uint64_t>(seed));
    const Plan plan = planJob(c.job, c.cluster, c.options);
    const Plan again = planJob(c.job, c.cluster, c.options);
    ASSERT_EQ(renderYaml(plan), renderYaml(again));
    ASSERT_NE(plan.outcome, PlanOutcome::Invalid) << plan.message;

    std::vector<std::pair<Resources, const api::PodTemplate*>> workers;
    for (const auto& g : c.job.spec.workers) {
      for (int i = 0; i < g.replicas; ++i) workers.push_back({demandOf(g), &g.podTemplate});
    }
    std::vector<Resources> free;
    for (const auto& n : c.cluster.nodes) free.push_back(c.cluster.freeOn(n));
    const bool feasible = fits(workers, 0, c.cluster, free);

    if (plan.planned()) {
      ++planned;
      EXPECT_TRUE(feasible) << "planned a job that cannot fit";
      checkPlanned(c, plan);
    } else {
      ++unschedulable;
      EXPECT_TRUE(plan.workers.empty());
      EXPECT_TRUE(plan.pods.empty());
      EXPECT_TRUE(plan.assignment.workers.empty());
      EXPECT_FALSE(plan.message.empty());
      if (feasible) ++missed;
    }
  }
  std::printf("planned %d, unschedulable %d, of which feasible but missed by the greedy: %d\n",
              planned, unschedulable, missed);
  // Both outcomes must be exercised, and the greedy must rarely give up on a job
  // that fits (it is a heuristic; it must never place one that does not).
  EXPECT_GT(planned, kCases / 5);
  EXPECT_GT(unschedulable, kCases / 10);
  EXPECT_LE(missed * 20, unschedulable) << "the greedy misses more than 5% of feasible jobs";
}

TEST(PlannerProperties, LargeJobsStayConsistent) {
  // 256 workers over 40 nodes: all pairs get channels; maps stay consistent.
  api::RpcJob job;
  job.metadata.name = "big";
  api::WorkerGroup g;
  g.name = "w";
  g.replicas = 256;
  g.gpusPerWorker = 1;
  job.spec.workers.push_back(g);
  job.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  Case c{job, {}, {}};
  for (int i = 0; i < 40; ++i) {
    Node n;
    n.name = "n" + std::to_string(100 + i);
    n.allocatable = {8, 64000, int64_t{256} << 30, 0};
    if (i % 2) n.labels[kRdmaLabel] = "true";
    c.cluster.nodes.push_back(n);
  }
  const Plan plan = planJob(c.job, c.cluster);
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.pods.size(), 32u);  // packed: 8 per node
  checkPlanned(c, plan);
}

}  // namespace
TEST(PlannerProperties, TheLargestJobHasASmallTable) {
  // The CRD's limit: 1024 single-GPU workers, here on 128 nodes of 8 GPUs, one pod
  // each. The table grows linearly: about 200 bytes a worker, not a pair.
  api::RpcJob job;
  job.metadata.name = "big-training-job";
  job.metadata.namespaceName = "research";
  api::WorkerGroup g;
  g.name = "trainer";
  g.replicas = api::kMaxWorkers;
  g.gpusPerWorker = 1;
  job.spec.workers.push_back(g);
  ClusterView cluster;
  for (int i = 0; i < 128; ++i) {
    Node n;
    n.name = "gpu-node-" + std::to_string(i);
    n.allocatable = {8, 64000, int64_t{512} << 30, 0};
    if (i % 2) n.labels[kRdmaLabel] = "true";
    cluster.nodes.push_back(n);
  }
  const Plan plan = planJob(job, cluster);
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.pods.size(), 1024u);
  const std::string text = toYaml(plan.assignment);
  EXPECT_LT(text.size(), std::size_t{256} << 10) << "a quarter of the 1 MiB object limit at most";
  // What the first and the last worker derive from it: a map to every peer (all
  // have a cuda channel), the inverse of each other's.
  const Assignment read = parseAssignment(text);
  const auto first = deviceMapsOf(read, read.workers.front().name);
  const auto last = deviceMapsOf(read, read.workers.back().name);
  EXPECT_EQ(first.size(), 1023u);
  EXPECT_EQ(last.size(), 1023u);
  const DeviceMap& there = first.at(read.workers.back().name);
  const DeviceMap& back = last.at(read.workers.front().name);
  ASSERT_EQ(there.size(), 1u);
  EXPECT_EQ(back.at(there.begin()->second), there.begin()->first);
  // One more worker is over the limit.
  job.spec.workers[0].replicas = api::kMaxWorkers + 1;
  EXPECT_EQ(planJob(job, cluster).outcome, PlanOutcome::Invalid);
}

}  // namespace rpcjob::planner
