#pragma once
// What two workers can talk over, from where they are (see plan.h for the table).

#include <string>
#include <vector>

#include "rpcjob/api/types.h"

namespace rpcjob::planner::detail {

struct Link {
  std::vector<std::string> transports;  // usable, in priority order
  std::vector<std::string> channels;    // CPU then CUDA channels, in priority order
  bool hasCpuChannel = false;
  bool hasCudaChannel = false;

  bool uses(const std::string& name) const;
};

// samePod: one pod, or one machine for local runs. bothRdma: both nodes have RDMA.
// bothGpus: both workers have GPUs (otherwise no cuda channel is listed).
Link linkBetween(bool samePod, bool bothRdma, bool bothGpus, const api::RpcJobSpec& spec);

}  // namespace rpcjob::planner::detail
