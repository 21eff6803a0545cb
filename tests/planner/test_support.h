#pragma once
// Small builders for planner tests.

#include <string>
#include <vector>

#include "rpcjob/api/types.h"
#include "rpcjob/planner/cluster.h"

namespace rpcjob::planner::testing {

inline Node gpuNode(const std::string& name, int gpus, bool rdma = false) {
  Node n;
  n.name = name;
  n.allocatable.gpus = gpus;
  n.allocatable.cpuMilli = 64000;
  n.allocatable.memoryBytes = int64_t{256} << 30;
  if (rdma) n.labels[kRdmaLabel] = "true";
  return n;
}

inline api::WorkerGroup group(const std::string& name, int replicas, int gpus) {
  api::WorkerGroup g;
  g.name = name;
  g.replicas = replicas;
  g.gpusPerWorker = gpus;
  return g;
}

inline api::RpcJob job(std::vector<api::WorkerGroup> groups, const std::string& name = "job") {
  api::RpcJob j;
  j.metadata.name = name;
  j.metadata.namespaceName = "ml";
  j.spec.workers = std::move(groups);
  return j;
}

inline ClusterView cluster(std::vector<Node> nodes) {
  ClusterView c;
  c.nodes = std::move(nodes);
  return c;
}

}  // namespace rpcjob::planner::testing
