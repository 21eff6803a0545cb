#pragma once
// How many CPUs this process may keep busy: its affinity mask, or its control
// group's quota where that is lower (a pod's CPU limit on Kubernetes). Spinning
// threads (spin_wait.h) are only worth their CPU where there is CPU to spare;
// under a quota, a spin is time the pod is throttled for.

#include <optional>
#include <string>

namespace rpcjob::runtime {

// The quota in a cgroup v2 cpu.max file's contents ("200000 100000": 2 CPUs),
// nullopt for "max ..." (no limit) or anything malformed. Pure.
std::optional<double> parseCgroupCpuMax(const std::string& contents);

// The same from cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (a quota of
// -1: no limit). Pure.
std::optional<double> parseCgroupCfsQuota(const std::string& quota, const std::string& period);

// min(CPUs in this process's affinity mask, its cgroup quotas); at least 1.
double availableCpus();

}  // namespace rpcjob::runtime
