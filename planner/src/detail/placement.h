#pragma once
// Putting workers on nodes (the bin packing part of the planner), all or nothing.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rpcjob/api/types.h"
#include "rpcjob/planner/cluster.h"

namespace rpcjob::planner::detail {

// One worker to place.
struct Slot {
  int group = 0;  // index in spec.workers
  int index = 0;  // index within the group
  std::string name;
  Resources demand;
  std::vector<int> candidates;  // node indices it may run on, ascending
  int pinned = -1;              // node index it must stay on (PlanOptions::pinned)
};

// The workers of a job in natural order (groups in spec order, indices ascending),
// with their demands and candidate nodes.
// `pinned`: worker name -> node name (PlanOptions::pinned); a name not in the
// cluster pins to no node (the slot then has no candidates).
std::vector<Slot> makeSlots(const api::RpcJob& job, const ClusterView& cluster,
                            const std::map<std::string, std::string>& pinned = {});

// Node index per slot, or nullopt when the greedy policies find no placement.
// workersPerGpu N: each free GPU of a node holds N workers of one GPU each
// (spec.placement.workersPerGpu; such jobs have gpusPerWorker <= 1).
std::optional<std::vector<int>> place(const std::vector<Slot>& slots, const ClusterView& cluster,
                                      api::PlacementPolicy policy, int workersPerGpu = 1);

// Why no placement was found: what is missing and where.
std::string explainUnschedulable(const api::RpcJob& job, const std::vector<Slot>& slots,
                                 const ClusterView& cluster);

}  // namespace rpcjob::planner::detail
