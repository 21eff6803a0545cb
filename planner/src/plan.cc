#include "rpcjob/planner/plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "detail/device_maps.h"
#include "detail/links.h"
#include "detail/placement.h"
#include "rpcjob/api/names.h"
#include "rpcjob/api/validate.h"

namespace rpcjob::planner {
namespace {

using detail::Slot;

// Ranks: nodes in the order of the first worker they hold, the workers of a node
// in natural order. Returns slot indices in rank order.
std::vector<std::size_t> rankOrder(const std::vector<Slot>& slots, const std::vector<int>& nodeOf) {
  std::map<int, std::size_t> firstSlotOnNode;
  for (std::size_t s = 0; s < slots.size(); ++s) firstSlotOnNode.emplace(nodeOf[s], s);
  std::vector<std::size_t> order(slots.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return firstSlotOnNode[nodeOf[a]] < firstSlotOnNode[nodeOf[b]];
  });
  return order;
}

// Workers (by rank) with node, pod, position in pod and GPU indices.
std::vector<WorkerPlacement> layOut(const api::RpcJob& job, const std::vector<Slot>& slots,
                                    const std::vector<int>& nodeOf, const ClusterView& cluster,
                                    Target target) {
  const bool sharedPods = job.spec.placement.workersPerPod == api::WorkersPerPod::Auto;
  std::vector<WorkerPlacement> workers;
  std::map<std::string, int> podOfNode;  // Auto: node -> pod number
  std::map<std::string, int> membersOf;  // pod (or node, locally) -> workers so far
  std::map<std::string, int> gpusUsed;   // pod (or node, locally) -> GPUs handed out
  for (std::size_t s : rankOrder(slots, nodeOf)) {
    const Slot& slot = slots[s];
    WorkerPlacement w;
    w.name = slot.name;
    w.group = job.spec.workers[slot.group].name;
    w.groupIndex = slot.index;
    w.rank = static_cast<int>(workers.size());
    w.node = cluster.nodes[nodeOf[s]].name;
    if (target == Target::Kubernetes) {
      if (sharedPods) {
        const auto [it, fresh] = podOfNode.emplace(w.node, static_cast<int>(podOfNode.size()));
        w.pod = api::sharedPodName(job.metadata.name, it->second);
      } else {
        w.pod = api::workerPodName(job.metadata.name, w.group, w.groupIndex);
      }
    }
    // Device indices as the process sees them: a pod sees its own GPUs from 0; a
    // local process sees every GPU of the machine.
    const std::string scope = target == Target::Kubernetes ? w.pod : w.node;
    w.indexInPod = membersOf[scope]++;
    for (int64_t k = 0; k < slot.demand.gpus; ++k) w.gpus.push_back(gpusUsed[scope]++);
    workers.push_back(std::move(w));
  }
  return workers;
}

std::vector<PodPlan> podsOf(const std::vector<WorkerPlacement>& workers,
                            const std::vector<Slot>& slotsByName) {
  std::map<std::string, Resources> demand;
  for (const auto& s : slotsByName) demand[s.name] = s.demand;
  std::vector<PodPlan> pods;
  std::map<std::string, std::size_t> index;
  for (const auto& w : workers) {
    const auto [it, fresh] = index.emplace(w.pod, pods.size());
    if (fresh) pods.push_back({w.pod, w.node, {}, {}, false, false, {}});
    PodPlan& pod = pods[it->second];
    pod.workers.push_back(w.name);
    pod.requests += demand[w.name];
  }
  return pods;
}

void addCapability(PodPlan& pod, const std::string& capability) {
  if (std::find(pod.capabilities.begin(), pod.capabilities.end(), capability) ==
      pod.capabilities.end()) {
    pod.capabilities.push_back(capability);
  }
}

Plan failed(PlanOutcome outcome, const std::string& reason, const std::string& message) {
  Plan plan;
  plan.outcome = outcome;
  plan.reason = reason;
  plan.message = message;
  return plan;
}

}  // namespace

const char* toString(PlanOutcome outcome) {
  switch (outcome) {
    case PlanOutcome::Planned:
      return "Planned";
    case PlanOutcome::Unschedulable:
      return "Unschedulable";
    case PlanOutcome::Invalid:
      return "Invalid";
  }
  return "Invalid";
}

Plan planJob(const api::RpcJob& job, const ClusterView& cluster, const PlanOptions& options) {
  if (auto errors = api::validateRpcJob(job); !errors.empty()) {
    Plan plan = failed(PlanOutcome::Invalid, "Invalid", api::formatErrors(errors));
    plan.errors = std::move(errors);
    return plan;
  }
  const std::vector<Slot> slots = detail::makeSlots(job, cluster, options.pinned);
  for (const auto& slot : slots) {
    if (options.pinned.count(slot.name) && slot.pinned < 0) {
      return failed(PlanOutcome::Unschedulable, "NodeGone",
                    "worker " + slot.name + " runs on node " + options.pinned.at(slot.name) +
                        ", which is no longer in the cluster");
    }
  }
  const auto nodeOf = detail::place(slots, cluster, job.spec.placement.policy);
  if (!nodeOf) {
    return failed(PlanOutcome::Unschedulable, "Unschedulable",
                  detail::explainUnschedulable(job, slots, cluster));
  }

  Plan plan;
  plan.workers = layOut(job, slots, *nodeOf, cluster, options.target);
  const bool local = options.target == Target::Local;
  if (!local) plan.pods = podsOf(plan.workers, slots);
  std::map<std::string, const Node*> nodeByName;
  for (const auto& n : cluster.nodes) nodeByName[n.name] = &n;
  std::map<std::string, std::size_t> podIndex;
  for (std::size_t p = 0; p < plan.pods.size(); ++p) podIndex[plan.pods[p].name] = p;

  // Links between every pair, and what they ask of the pods.
  const std::size_t n = plan.workers.size();
  std::vector<std::vector<bool>> cudaPairs(n, std::vector<bool>(n, false));
  std::vector<std::map<std::string, std::vector<std::string>>> channels(n);
  bool stagedCuda = false;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      const WorkerPlacement& a = plan.workers[i];
      const WorkerPlacement& b = plan.workers[j];
      const bool samePod = local ? a.node == b.node : a.pod == b.pod;
      const bool rdma = nodeByName[a.node]->hasRdma() && nodeByName[b.node]->hasRdma();
      const bool gpus = !a.gpus.empty() && !b.gpus.empty();
      const detail::Link link = detail::linkBetween(samePod, rdma, gpus, job.spec);
      if (link.transports.empty() || !link.hasCpuChannel) {
        return failed(PlanOutcome::Unschedulable, "NoTransport",
                      "workers " + a.name + " (" + (local ? a.node : a.pod) + ") and " + b.name +
                          " (" + (local ? b.node : b.pod) + ") have no allowed " +
                          (link.transports.empty() ? "transport" : "CPU channel") +
                          " between them: allow uv and basic in spec.transports/spec.channels, "
                          "or use workersPerPod: Auto to put workers of one node in one pod");
      }
      cudaPairs[i][j] = cudaPairs[j][i] = link.hasCudaChannel;
      stagedCuda = stagedCuda || (gpus && !link.hasCudaChannel);
      channels[i][b.name] = link.channels;
      channels[j][a.name] = link.channels;
      if (local) continue;
      for (const WorkerPlacement* w : {&a, &b}) {
        PodPlan& pod = plan.pods[podIndex[w->pod]];
        if (samePod && link.uses("shm")) pod.shmVolume = true;
        if (samePod && link.uses("cma")) {
          pod.shareProcessNamespace = true;
          addCapability(pod, "SYS_PTRACE");
        }
        if (link.uses("ibv") || link.uses("cuda_gdr")) {
          addCapability(pod, "IPC_LOCK");
          if (nodeByName[pod.node]->allocatable.rdma > 0) pod.requests.rdma = 1;
        }
      }
    }
  }
  if (stagedCuda) {
    plan.notes.push_back(
        "some GPU workers have no allowed cuda channel between them: no device map; their CUDA "
        "tensors go through CPU memory");
  }
  for (const auto& pod : plan.pods) {
    const Node* node = nodeByName[pod.node];
    if (pod.requests.gpus > 1 && pod.workers.size() > 1 && node->hasNvlink()) {
      plan.notes.push_back("pod " + pod.name + " on " + pod.node +
                           ": its workers' GPUs are connected by NVLink (cuda_nvlink, cuda_ipc)");
    }
  }

  const detail::DeviceMapTable maps =
      detail::deviceMaps(plan.workers, cudaPairs, job.spec.deviceMaps);
  EndpointFn endpoints = options.endpoints;
  if (!endpoints) {
    endpoints = local ? localEndpoints(kDefaultRpcPort, job.spec.metrics.port)
                      : headlessServiceEndpoints(job);
  }
  Assignment& a = plan.assignment;
  a.jobName = job.metadata.name;
  a.jobNamespace = job.metadata.namespaceName;
  a.transports = job.spec.transports;
  a.channels = job.spec.channels;
  for (std::size_t i = 0; i < n; ++i) {
    const WorkerPlacement& w = plan.workers[i];
    const Endpoint e = endpoints(w);
    WorkerEntry entry;
    entry.name = w.name;
    entry.rank = w.rank;
    entry.group = w.group;
    entry.address = e.address;
    entry.metricsPort = e.metricsPort;
    entry.node = w.node;
    entry.pod = w.pod;
    entry.gpus = w.gpus;
    if (const auto it = maps.find(w.name); it != maps.end()) {
      for (const auto& [peer, map] : it->second) {
        if (!map.empty()) entry.deviceMaps[peer] = map;
      }
    }
    entry.channels = std::move(channels[i]);
    a.workers.push_back(std::move(entry));
  }
  plan.outcome = PlanOutcome::Planned;
  plan.reason = "Planned";
  std::set<std::string> nodesUsed;
  for (const auto& w : plan.workers) nodesUsed.insert(w.node);
  plan.message = std::to_string(n) + " workers on " + std::to_string(nodesUsed.size()) +
                 " node(s)" + (local ? "" : " in " + std::to_string(plan.pods.size()) + " pod(s)");
  return plan;
}

}  // namespace rpcjob::planner
