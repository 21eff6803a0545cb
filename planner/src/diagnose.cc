// Unschedulable messages: name the resource, how much more is needed, where the
// planner looked, and what is free there, e.g.
//   group 'worker' needs 4 more nvidia.com/gpu on nodes with gpu=a100 (needs 8 for
//   4 workers); free: gpu-a: 2, gpu-b: 2

#include <algorithm>
#include <functional>
#include <set>

#include "detail/eligibility.h"
#include "detail/placement.h"

namespace rpcjob::planner::detail {
namespace {

constexpr std::size_t kNodesShown = 8;

struct Kind {
  const char* name;
  int64_t Resources::*field;
  std::string (*format)(int64_t);
};

std::string formatCount(int64_t v) {
  return std::to_string(v);
}

std::string formatCpu(int64_t milli) {
  return milli % 1000 == 0 ? std::to_string(milli / 1000) : std::to_string(milli) + "m";
}

std::string formatMemory(int64_t bytes) {
  static const char* const kUnits[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
  for (int i = 0; i < 6; ++i) {
    const int64_t unit = int64_t{1} << (10 * (6 - i));
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + kUnits[i];
  }
  if (bytes >= (int64_t{1} << 20)) return std::to_string((bytes + (1 << 20) - 1) >> 20) + "Mi";
  return std::to_string(bytes);
}

const Kind kKinds[] = {{"nvidia.com/gpu", &Resources::gpus, formatCount},
                       {"cpu", &Resources::cpuMilli, formatCpu},
                       {"memory", &Resources::memoryBytes, formatMemory}};

std::string freeList(const std::vector<int>& nodes, const ClusterView& cluster, const Kind& kind) {
  std::string out;
  std::size_t shown = 0;
  for (int n : nodes) {
    if (shown++ == kNodesShown) {
      out += ", and " + std::to_string(nodes.size() - kNodesShown) + " more";
      break;
    }
    const Resources free = cluster.freeOn(cluster.nodes[n]);
    out += (out.empty() ? "" : ", ") + cluster.nodes[n].name + ": " + kind.format(free.*kind.field);
  }
  return out;
}

std::string excludedList(const api::PodTemplate& t, const ClusterView& cluster) {
  std::string out;
  std::size_t shown = 0;
  for (const auto& node : cluster.nodes) {
    const std::string why = ineligibility(node, t);
    if (why.empty()) continue;
    if (shown++ == kNodesShown) {
      out += "; ...";
      break;
    }
    out += (out.empty() ? "" : "; ") + node.name + ": " + why;
  }
  return out;
}

// Problems of one group on its own.
void explainGroup(const api::WorkerGroup& group, const std::vector<int>& candidates,
                  const Resources& demand, const ClusterView& cluster,
                  std::vector<std::string>& out) {
  const std::string where = detail::describeConstraints(group.podTemplate);
  if (candidates.empty()) {
    out.push_back("group '" + group.name + "': no node can run it (" + where + "): " +
                  (cluster.nodes.empty() ? "the cluster has no nodes"
                                         : excludedList(group.podTemplate, cluster)));
    return;
  }
  for (const Kind& kind : kKinds) {
    const int64_t each = demand.*kind.field;
    if (each == 0) continue;
    int64_t most = 0;
    int64_t total = 0;
    for (int n : candidates) {
      const int64_t free = cluster.freeOn(cluster.nodes[n]).*kind.field;
      most = std::max(most, free);
      total += free;
    }
    const int64_t need = each * group.replicas;
    if (each > most) {
      out.push_back("each '" + group.name + "' worker needs " + kind.format(each) + " " +
                    kind.name + " but no node of " + where +
                    " has that much free; free: " + freeList(candidates, cluster, kind));
    } else if (need > total) {
      out.push_back("group '" + group.name + "' needs " + kind.format(need - total) + " more " +
                    kind.name + " on " + where + " (" + kind.format(need) + " for " +
                    std::to_string(group.replicas) +
                    " workers); free: " + freeList(candidates, cluster, kind));
    }
  }
}

}  // namespace

std::string explainUnschedulable(const api::RpcJob& job, const std::vector<Slot>& slots,
                                 const ClusterView& cluster) {
  std::vector<std::string> problems;
  std::set<int> allCandidates;
  Resources jobDemand;
  for (std::size_t g = 0; g < job.spec.workers.size(); ++g) {
    const auto first = std::find_if(slots.begin(), slots.end(),
                                    [&](const Slot& s) { return s.group == static_cast<int>(g); });
    if (first == slots.end()) continue;
    explainGroup(job.spec.workers[g], first->candidates, first->demand, cluster, problems);
    allCandidates.insert(first->candidates.begin(), first->candidates.end());
    for (int i = 0; i < job.spec.workers[g].replicas; ++i) jobDemand += first->demand;
  }
  if (problems.empty()) {
    // Each group fits alone: the groups compete for the same nodes.
    const std::vector<int> nodes(allCandidates.begin(), allCandidates.end());
    for (const Kind& kind : kKinds) {
      int64_t total = 0;
      for (int n : nodes) total += cluster.freeOn(cluster.nodes[n]).*kind.field;
      if (jobDemand.*kind.field > total) {
        problems.push_back("the job needs " + kind.format(jobDemand.*kind.field - total) +
                           " more " + kind.name + " in all (" + kind.format(jobDemand.*kind.field) +
                           "); free: " + freeList(nodes, cluster, kind));
      }
    }
    if (problems.empty()) {
      problems.push_back(
          "enough is free in total, but not in pieces the workers fit into; free "
          "nvidia.com/gpu: " +
          freeList(nodes, cluster, kKinds[0]));
    }
  }
  std::string message;
  for (const auto& p : problems) message += (message.empty() ? "" : "; ") + p;
  return message;
}

}  // namespace rpcjob::planner::detail
