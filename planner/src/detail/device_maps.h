#pragma once
// Device maps between GPU workers: automatic ones from the placement, and the
// spec's explicit ones translated from per-worker GPU numbers to device indices.

#include <map>
#include <string>
#include <vector>

#include "rpcjob/api/types.h"
#include "rpcjob/planner/plan.h"

namespace rpcjob::planner::detail {

// by worker name -> by peer name -> {local device -> peer device}
using DeviceMapTable = std::map<std::string, std::map<std::string, DeviceMap>>;

// `cudaPairs[i][j]` says whether workers i and j (indices into `workers`) have a
// cuda channel. Every map in the result has its inverse in the other direction.
DeviceMapTable deviceMaps(const std::vector<WorkerPlacement>& workers,
                          const std::vector<std::vector<bool>>& cudaPairs,
                          const api::DeviceMaps& spec);

}  // namespace rpcjob::planner::detail
