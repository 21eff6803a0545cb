#include "rpcjob/planner/cluster.h"

#include <algorithm>

namespace rpcjob::planner {

Resources& Resources::operator+=(const Resources& o) {
  gpus += o.gpus;
  cpuMilli += o.cpuMilli;
  memoryBytes += o.memoryBytes;
  rdma += o.rdma;
  return *this;
}

Resources& Resources::operator-=(const Resources& o) {
  gpus -= o.gpus;
  cpuMilli -= o.cpuMilli;
  memoryBytes -= o.memoryBytes;
  rdma -= o.rdma;
  return *this;
}

bool Resources::covers(const Resources& d) const {
  return gpus >= d.gpus && cpuMilli >= d.cpuMilli && memoryBytes >= d.memoryBytes && rdma >= d.rdma;
}

bool Node::hasRdma() const {
  const auto it = labels.find(kRdmaLabel);
  return (it != labels.end() && it->second == "true") || allocatable.rdma > 0;
}

bool Node::hasNvlink() const {
  const auto it = labels.find(kNvlinkLabel);
  return it != labels.end() && it->second == "true";
}

Resources ClusterView::freeOn(const Node& node) const {
  Resources free = node.allocatable;
  const auto it = used.find(node.name);
  if (it != used.end()) free -= it->second;
  free.gpus = std::max<int64_t>(free.gpus, 0);
  free.cpuMilli = std::max<int64_t>(free.cpuMilli, 0);
  free.memoryBytes = std::max<int64_t>(free.memoryBytes, 0);
  free.rdma = std::max<int64_t>(free.rdma, 0);
  return free;
}

ClusterView localCluster(int gpus, int64_t cpuMilli, int64_t memoryBytes, const std::string& name) {
  Node node;
  node.name = name;
  node.allocatable.gpus = gpus;
  node.allocatable.cpuMilli = cpuMilli;
  node.allocatable.memoryBytes = memoryBytes;
  ClusterView view;
  view.nodes.push_back(node);
  return view;
}

}  // namespace rpcjob::planner
