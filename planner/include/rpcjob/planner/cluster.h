#pragma once
// What the planner knows about a cluster: its nodes (allocatable resources, labels,
// taints, readiness) and what running pods already use on each. The operator builds
// it from the API server's Nodes and Pods, `rpcjob plan --nodes` from a described
// cluster (cluster_yaml.h), `rpcjob run` from the local machine (localCluster).
//
// Capabilities, defined here once:
//  - RDMA (GPUDirect RDMA for cuda_gdr, InfiniBand verbs for ibv): a node has it
//    when it is labelled `rpcjob.dev/rdma: "true"` or advertises allocatable
//    `rdma/hca` (the RDMA shared device plugin's resource). Where the node
//    advertises `rdma/hca`, pods that use RDMA request one.
//  - NVLink: a node labelled `rpcjob.dev/nvlink: "true"` has its GPUs connected by
//    NVLink; it is shown in plans (cuda_ipc works over PCIe peer-to-peer too).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rpcjob/planner/gpu_topology.h"

namespace rpcjob::planner {

inline constexpr const char* kGpuResource = "nvidia.com/gpu";
inline constexpr const char* kRdmaResource = "rdma/hca";
inline constexpr const char* kRdmaLabel = "rpcjob.dev/rdma";
inline constexpr const char* kNvlinkLabel = "rpcjob.dev/nvlink";

struct Resources {
  int64_t gpus = 0;
  int64_t cpuMilli = 0;
  int64_t memoryBytes = 0;
  int64_t rdma = 0;  // rdma/hca

  Resources& operator+=(const Resources& other);
  Resources& operator-=(const Resources& other);
  // Every amount of `demand` is available here.
  bool covers(const Resources& demand) const;
};

struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // NoSchedule, PreferNoSchedule, NoExecute
};

struct Node {
  std::string name;
  Resources allocatable;
  std::map<std::string, std::string> labels;
  std::vector<Taint> taints;
  bool ready = true;
  bool unschedulable = false;
  // How its GPUs are joined, where known (local runs: NVML). Local plans hand a
  // node's GPUs out in neighbourOrder(), so consecutive ranks get NVLink-joined
  // GPUs; pods see the GPUs the device plugin gives them, so it is shown only.
  GpuTopology gpuTopology;

  bool hasRdma() const;
  bool hasNvlink() const;
};

struct ClusterView {
  std::vector<Node> nodes;
  std::map<std::string, Resources> used;  // node name -> requests of running pods

  // allocatable - used, never below zero.
  Resources freeOn(const Node& node) const;
};

// One ready node named `name` with the given resources and nothing used: the
// machine `rpcjob run` runs on.
ClusterView localCluster(int gpus, int64_t cpuMilli, int64_t memoryBytes,
                         const std::string& name = "localhost");

}  // namespace rpcjob::planner
