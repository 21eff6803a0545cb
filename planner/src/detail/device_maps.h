#pragma once
// The spec's explicit device maps, translated from per-worker GPU numbers to the
// device indices the workers' processes see: the only per-pair data the worker
// table carries. Every other pair's map is derived (rpcjob/assignment/pair_links.h).

#include <map>
#include <string>
#include <vector>

#include "rpcjob/api/types.h"
#include "rpcjob/planner/plan.h"

namespace rpcjob::planner::detail {

// by worker name -> by peer name -> {local device -> peer device}, each as written
// (the reverse direction is derived as the inverse).
using DeviceMapTable = std::map<std::string, std::map<std::string, DeviceMap>>;

DeviceMapTable explicitDeviceMaps(const std::vector<WorkerPlacement>& workers,
                                  const api::DeviceMaps& spec);

DeviceMapMode deviceMapMode(const api::DeviceMaps& spec);

}  // namespace rpcjob::planner::detail
