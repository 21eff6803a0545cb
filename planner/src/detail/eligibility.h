#pragma once
// Which nodes a worker group may run on: the scheduler's filters that the planner
// must agree with, or the pods it pins would be rejected.

#include <string>

#include "rpcjob/api/types.h"
#include "rpcjob/planner/cluster.h"

namespace rpcjob::planner::detail {

// Empty when `node` can run pods of `podTemplate`; else why not, for messages
// ("not ready", "taint dedicated=ml:NoSchedule", "nodeSelector gpu=a100").
std::string ineligibility(const Node& node, const api::PodTemplate& podTemplate);

// The template's constraints in words: "nodes with gpu=a100, tolerating ...", or
// "any ready node".
std::string describeConstraints(const api::PodTemplate& podTemplate);

}  // namespace rpcjob::planner::detail
