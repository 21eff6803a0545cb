#include <algorithm>
#include <tuple>

#include "detail/eligibility.h"
#include "detail/placement.h"
#include "rpcjob/api/names.h"
#include "rpcjob/api/quantity.h"

namespace rpcjob::planner::detail {
namespace {

Resources demandOf(const api::WorkerGroup& group) {
  Resources d;
  d.gpus = group.gpusPerWorker;
  for (const auto& c : group.podTemplate.containers) {
    if (const auto cpu = api::parseQuantity(c.cpuRequest)) d.cpuMilli += cpu->milli;
    if (const auto memory = api::parseQuantity(c.memoryRequest)) d.memoryBytes += memory->value();
  }
  return d;
}

// Larger first: used to open Pack's next node and to order workers on a retry.
auto sizeKey(const Resources& r) {
  return std::make_tuple(-r.gpus, -r.cpuMilli, -r.memoryBytes);
}

bool isCandidate(const Slot& slot, int node) {
  return std::binary_search(slot.candidates.begin(), slot.candidates.end(), node);
}

std::optional<std::vector<int>> placeInOrder(const std::vector<Slot>& slots,
                                             const std::vector<std::size_t>& order,
                                             const ClusterView& cluster,
                                             api::PlacementPolicy policy, int workersPerGpu) {
  const int nodeCount = static_cast<int>(cluster.nodes.size());
  std::vector<Resources> free;
  for (const auto& node : cluster.nodes) {
    free.push_back(cluster.freeOn(node));
    free.back().gpus *= std::max(1, workersPerGpu);  // in workers' shares of a GPU
  }
  std::vector<int> workersOn(nodeCount, 0);
  std::vector<int> opened;  // Pack: nodes in the order they were first used
  std::vector<int> result(slots.size(), -1);
  // Pinned workers first: they hold their node whether or not the policy would
  // pick it now (they run there already).
  for (std::size_t s : order) {
    const Slot& slot = slots[s];
    if (slot.pinned < 0) continue;
    free[slot.pinned] -= slot.demand;
    if (workersOn[slot.pinned]++ == 0) opened.push_back(slot.pinned);
    result[s] = slot.pinned;
  }
  for (std::size_t s : order) {
    const Slot& slot = slots[s];
    if (result[s] >= 0) continue;
    int pick = -1;
    if (policy == api::PlacementPolicy::Pack) {
      for (int n : opened) {
        if (isCandidate(slot, n) && free[n].covers(slot.demand)) {
          pick = n;
          break;
        }
      }
    }
    if (pick < 0) {
      auto key = [&](int n) {
        return std::make_tuple(policy == api::PlacementPolicy::Spread ? workersOn[n] : 0,
                               sizeKey(free[n]), cluster.nodes[n].name);
      };
      for (int n : slot.candidates) {
        if (!free[n].covers(slot.demand)) continue;
        if (policy == api::PlacementPolicy::Pack && workersOn[n] > 0) continue;  // tried above
        if (pick < 0 || key(n) < key(pick)) pick = n;
      }
      if (pick >= 0 && workersOn[pick] == 0) opened.push_back(pick);
    }
    if (pick < 0) return std::nullopt;
    free[pick] -= slot.demand;
    ++workersOn[pick];
    result[s] = pick;
  }
  return result;
}

}  // namespace

std::vector<Slot> makeSlots(const api::RpcJob& job, const ClusterView& cluster,
                            const std::map<std::string, std::string>& pinned) {
  std::vector<Slot> slots;
  for (std::size_t g = 0; g < job.spec.workers.size(); ++g) {
    const api::WorkerGroup& group = job.spec.workers[g];
    std::vector<int> candidates;
    for (std::size_t n = 0; n < cluster.nodes.size(); ++n) {
      if (ineligibility(cluster.nodes[n], group.podTemplate).empty()) {
        candidates.push_back(static_cast<int>(n));
      }
    }
    const Resources demand = demandOf(group);
    for (int i = 0; i < group.replicas; ++i) {
      Slot slot{static_cast<int>(g), i, api::workerName(group, i), demand, candidates, -1};
      if (auto pin = pinned.find(slot.name); pin != pinned.end()) {
        slot.candidates.clear();
        for (std::size_t n = 0; n < cluster.nodes.size(); ++n) {
          if (cluster.nodes[n].name == pin->second) slot.pinned = static_cast<int>(n);
        }
        if (slot.pinned >= 0) slot.candidates.push_back(slot.pinned);
      }
      slots.push_back(std::move(slot));
    }
  }
  return slots;
}

std::optional<std::vector<int>> place(const std::vector<Slot>& slots, const ClusterView& cluster,
                                      api::PlacementPolicy policy, int workersPerGpu) {
  std::vector<std::size_t> order(slots.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (auto placed = placeInOrder(slots, order, cluster, policy, workersPerGpu)) return placed;
  // Largest first packs better when groups differ in size; ties keep natural order.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return sizeKey(slots[a].demand) < sizeKey(slots[b].demand);
  });
  return placeInOrder(slots, order, cluster, policy, workersPerGpu);
}

}  // namespace rpcjob::planner::detail
