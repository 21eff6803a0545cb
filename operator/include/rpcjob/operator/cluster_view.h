#pragma once
// Node and Pod objects (JSON as the API server sends them) -> the planner's
// ClusterView. Pure: no I/O.
//
//  - A Node: allocatable nvidia.com/gpu, cpu, memory and rdma/hca; labels; taints
//    (spec.taints); ready when its Ready condition is "True" (a Node with no
//    conditions is not ready); unschedulable from spec.unschedulable.
//  - A Pod uses what it requests on the node it is bound to (spec.nodeName) while
//    it is not terminal (phase neither Succeeded nor Failed): per resource, the
//    larger of the sum over containers and the largest init container, as the
//    scheduler counts it. A container's request defaults to its limit (extended
//    resources such as nvidia.com/gpu are set as limits).
//  - The pods of the job being planned are left out of the usage: they hold what
//    its own plan reserved, so re-planning a running job gives the same placement.

#include <string>
#include <vector>

#include "rpcjob/operator/object.h"
#include "rpcjob/planner/cluster.h"

namespace rpcjob::op {

// nullopt-free: a Node JSON that does not parse gives a Node with only its name
// (not ready), so it never attracts a placement.
planner::Node nodeFromJson(const std::string& nodeJson);

// What one pod requests (see above), whether or not it is bound or running.
planner::Resources podRequests(const std::string& podJson);

// Bound (spec.nodeName set) and not terminal.
bool podHoldsResources(const std::string& podJson);

// Every node, with the usage of every pod that holds resources except those
// controlled by `excludeOwnerUid` (the job being planned; empty: none).
planner::ClusterView clusterViewFrom(const std::vector<kube::ObjectPtr>& nodes,
                                     const std::vector<kube::ObjectPtr>& pods,
                                     const std::string& excludeOwnerUid = "");

}  // namespace rpcjob::op
