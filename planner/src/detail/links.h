#pragma once
// What two workers can talk over, from where they are: the rules live once, in
// rpcjob/assignment/pair_links.h, which the runtime calls too (see plan.h).

#include <array>
#include <string>
#include <vector>

#include "rpcjob/api/types.h"
#include "rpcjob/assignment/pair_links.h"

namespace rpcjob::planner::detail {

using Link = PairLink;

// samePod: one pod, or one machine for local runs. bothRdma: both nodes have RDMA.
// bothGpus: both workers have GPUs (otherwise no cuda channel is listed).
Link linkBetween(bool samePod, bool bothRdma, bool bothGpus, const api::RpcJobSpec& spec);

// linkBetween for the eight kinds of pair, each computed once: a plan visits every
// pair of workers (half a million for 1024 workers).
class LinkTable {
 public:
  explicit LinkTable(const api::RpcJobSpec& spec);
  const Link& get(bool samePod, bool bothRdma, bool bothGpus) const {
    return links_[(samePod ? 4 : 0) + (bothRdma ? 2 : 0) + (bothGpus ? 1 : 0)];
  }

 private:
  std::array<Link, 8> links_;
};

}  // namespace rpcjob::planner::detail
