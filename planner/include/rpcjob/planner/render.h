#pragma once
// Plans for people (`rpcjob plan`): a table, and YAML (placement, pods, the
// assignment exactly as workers would read it, and the per-pair channels and
// device maps derived from it, the first 10000 pairs).

#include <string>

#include "rpcjob/planner/plan.h"

namespace rpcjob::planner {

std::string renderTable(const Plan& plan);
std::string renderYaml(const Plan& plan);

}  // namespace rpcjob::planner
