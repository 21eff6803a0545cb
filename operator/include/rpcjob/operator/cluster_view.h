#pragma once
// Node and Pod objects (JSON as the API server sends them) -> the planner's
// ClusterView. Pure: no I/O.
//
//  - A Node: allocatable nvidia.com/gpu, cpu, memory and rdma/hca; labels; taints
//    (spec.taints); ready when its Ready condition is "True" (a Node with no
//    conditions is not ready); unschedulable from spec.unschedulable.
//  - A Pod uses what it requests on the node it is bound to (spec.nodeName), or,
//    not yet bound, on the node the operator pinned it to (annotation
//    rpcjob.dev/node: created pods hold their GPUs before the scheduler binds
//    them, so two jobs never plan onto the same GPUs), while it is not terminal (phase neither
//    Succeeded nor Failed): per resource, the larger of the sum over containers and the largest
//    init container, as the scheduler counts it. A container's request defaults to its limit
//    (extended resources such as nvidia.com/gpu are set as limits).
//  - The pods of the job being planned are left out of the usage: they hold what
//    its own plan reserved, so re-planning a running job gives the same placement.

#include <chrono>
#include <optional>
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

// Not terminal, and bound or pinned by the operator.
bool podHoldsResources(const std::string& podJson);
// The node a pod holds resources on: spec.nodeName, else the rpcjob.dev/node
// annotation, else "".
std::string podNode(const std::string& podJson);

// When a node's Ready condition last changed (lastTransitionTime): how long a
// NotReady node has been so. nullopt without a Ready condition or a parsable time.
std::optional<std::chrono::system_clock::time_point> nodeReadySince(const std::string& nodeJson);

// Every node, with the usage of every pod that holds resources except those
// controlled by `excludeOwnerUid` (the job being planned; empty: none).
planner::ClusterView clusterViewFrom(const std::vector<kube::ObjectPtr>& nodes,
                                     const std::vector<kube::ObjectPtr>& pods,
                                     const std::string& excludeOwnerUid = "");

}  // namespace rpcjob::op
