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
  std::map<std::string, int> gpusUsed;   // pod (or node, locally) -> GPU shares handed out
  const int sharing = std::max(1, job.spec.placement.workersPerGpu);
  // Locally, the physical GPUs in the order that makes neighbours NVLink-joined.
  std::map<std::string, std::vector<int>> gpuOrder;  // node -> GPUs to hand out, in order
  if (target == Target::Local) {
    std::map<int, int64_t> shares;  // node index -> GPU shares placed there
    for (std::size_t s = 0; s < slots.size(); ++s) shares[nodeOf[s]] += slots[s].demand.gpus;
    for (const auto& [node, total] : shares) {
      const Node& n = cluster.nodes[node];
      const int needed = static_cast<int>((total + sharing - 1) / sharing);
      gpuOrder[n.name] = neighbourOrder(n.gpuTopology, needed);
    }
  }
  auto physical = [&](const std::string& scope, int index) {
    const auto it = gpuOrder.find(scope);
    return it != gpuOrder.end() && index < static_cast<int>(it->second.size()) ? it->second[index]
                                                                               : index;
  };
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
    // With workersPerGpu N, consecutive GPU workers of a scope share GPU i / N.
    for (int64_t k = 0; k < slot.demand.gpus; ++k) {
      w.gpus.push_back(physical(scope, gpusUsed[scope]++ / sharing));
    }
    workers.push_back(std::move(w));
  }
  return workers;
}

std::vector<PodPlan> podsOf(const std::vector<WorkerPlacement>& workers,
                            const std::vector<Slot>& slotsByName, int workersPerGpu) {
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
  // Workers sharing GPUs: the pod asks for its GPUs, not for its workers' shares.
  const int sharing = std::max(1, workersPerGpu);
  for (auto& pod : pods) pod.requests.gpus = (pod.requests.gpus + sharing - 1) / sharing;
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
  const auto nodeOf =
      detail::place(slots, cluster, job.spec.placement.policy, job.spec.placement.workersPerGpu);
  if (!nodeOf) {
    return failed(PlanOutcome::Unschedulable, "Unschedulable",
                  detail::explainUnschedulable(job, slots, cluster));
  }

  Plan plan;
  plan.workers = layOut(job, slots, *nodeOf, cluster, options.target);
  const bool local = options.target == Target::Local;
  if (!local) plan.pods = podsOf(plan.workers, slots, job.spec.placement.workersPerGpu);
  std::map<std::string, const Node*> nodeByName;
  for (const auto& n : cluster.nodes) nodeByName[n.name] = &n;
  std::map<std::string, std::size_t> podIndex;
  for (std::size_t p = 0; p < plan.pods.size(); ++p) podIndex[plan.pods[p].name] = p;

  // Links between every pair, and what they ask of the pods. The worker table
  // carries none of this: the runtime derives each pair's link the same way
  // (rpcjob/assignment/pair_links.h).
  const std::size_t n = plan.workers.size();
  const detail::LinkTable links(job.spec);
  std::vector<bool> rdmaOf(n);
  std::vector<std::size_t> podOf(n);
  std::vector<bool> podNodeHasHca(plan.pods.size());
  for (std::size_t p = 0; p < plan.pods.size(); ++p) {
    podNodeHasHca[p] = nodeByName[plan.pods[p].node]->allocatable.rdma > 0;
  }
  for (std::size_t i = 0; i < n; ++i) {
    rdmaOf[i] = nodeByName[plan.workers[i].node]->hasRdma();
    if (!local) podOf[i] = podIndex[plan.workers[i].pod];
  }
  bool stagedCuda = false;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      const WorkerPlacement& a = plan.workers[i];
      const WorkerPlacement& b = plan.workers[j];
      const bool samePod = local ? a.node == b.node : podOf[i] == podOf[j];
      const bool gpus = !a.gpus.empty() && !b.gpus.empty();
      const detail::Link& link = links.get(samePod, rdmaOf[i] && rdmaOf[j], gpus);
      if (link.transports.empty() || !link.hasCpuChannel) {
        return failed(PlanOutcome::Unschedulable, "NoTransport",
                      "workers " + a.name + " (" + (local ? a.node : a.pod) + ") and " + b.name +
                          " (" + (local ? b.node : b.pod) + ") have no allowed " +
                          (link.transports.empty() ? "transport" : "CPU channel") +
                          " between them: allow uv and basic in spec.transports/spec.channels, "
                          "or use workersPerPod: Auto to put workers of one node in one pod");
      }
      stagedCuda = stagedCuda || (gpus && !link.hasCudaChannel);
      if (local) continue;
      for (const std::size_t w : {i, j}) {
        PodPlan& pod = plan.pods[podOf[w]];
        if (samePod && link.uses("shm")) pod.shmVolume = true;
        if (samePod && link.uses("cma")) {
          pod.shareProcessNamespace = true;
          addCapability(pod, "SYS_PTRACE");
        }
        if (link.uses("ibv") || link.uses("cuda_gdr")) {
          addCapability(pod, "IPC_LOCK");
          if (podNodeHasHca[podOf[w]]) pod.requests.rdma = 1;
        }
      }
    }
  }
  if (stagedCuda) {
    plan.notes.push_back(
        "some GPU workers have no allowed cuda channel between them: no device map; their CUDA "
        "tensors go through CPU memory");
  }
  std::set<std::string> described;
  for (const auto& w : plan.workers) {
    const Node* node = nodeByName[w.node];
    if (w.gpus.empty() || !node->gpuTopology.known() || !described.insert(w.node).second) continue;
    std::string gpus;
    for (const auto& v : plan.workers) {
      if (v.node != w.node) continue;
      for (int g : v.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
    }
    plan.notes.push_back("GPU topology of " + w.node + ": " + describeTopology(node->gpuTopology) +
                         (local ? "; GPUs by rank " + gpus : ""));
  }
  if (job.spec.placement.workersPerGpu > 1) {
    std::map<std::pair<std::string, int>, std::vector<std::string>> sharers;  // (scope, gpu)
    for (const auto& w : plan.workers) {
      for (int g : w.gpus) sharers[{local ? w.node : w.pod, g}].push_back(w.name);
    }
    for (const auto& [where, names] : sharers) {
      if (names.size() < 2) continue;
      std::string list;
      for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
      plan.notes.push_back("workers " + list + " share GPU " + std::to_string(where.second) +
                           " of " + where.first + " (spec.placement.workersPerGpu " +
                           std::to_string(job.spec.placement.workersPerGpu) +
                           "; cuda:X maps to cuda:X on the same GPU)");
    }
  }
  for (const auto& pod : plan.pods) {
    const Node* node = nodeByName[pod.node];
    if (pod.requests.gpus > 1 && pod.workers.size() > 1 && node->hasNvlink()) {
      plan.notes.push_back("pod " + pod.name + " on " + pod.node +
                           ": its workers' GPUs are connected by NVLink (cuda_nvlink, cuda_ipc)");
    }
  }

  detail::DeviceMapTable maps = detail::explicitDeviceMaps(plan.workers, job.spec.deviceMaps);
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
  a.deviceMapMode = detail::deviceMapMode(job.spec.deviceMaps);
  for (const auto& w : plan.workers) {
    const Node* node = nodeByName[w.node];
    a.nodes[w.node] = NodeLinks{node->hasRdma(), node->hasNvlink()};
  }
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
      entry.explicitDeviceMaps = std::move(it->second);
    }
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
