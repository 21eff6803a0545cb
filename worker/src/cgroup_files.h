#pragma once
// Reading this process's control groups (cgroup v2, and v1's controllers): the
// limits a pod's resources set (memory_limit.h, cpu_budget.h).

#include <string>

namespace rpcjob::runtime {

// The whole file; empty when it cannot be read.
std::string readWholeFile(const std::string& path);

// This process's group in one hierarchy, from the text of /proc/self/cgroup:
// the v2 one ("0::/path") for `controller` empty, else the v1 one holding
// `controller` ("4:memory:/path"). Empty when there is none. Pure.
std::string ownCgroup(const std::string& procSelfCgroup, const std::string& controller);

}  // namespace rpcjob::runtime
