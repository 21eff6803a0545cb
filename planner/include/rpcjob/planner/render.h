#pragma once
// Plans for people (`rpcjob plan`): a table, and YAML (placement, pods and the
// assignment exactly as workers would read it).

#include <string>

#include "rpcjob/planner/plan.h"

namespace rpcjob::planner {

std::string renderTable(const Plan& plan);
std::string renderYaml(const Plan& plan);

}  // namespace rpcjob::planner
