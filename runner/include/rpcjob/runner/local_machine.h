#pragma once
// What this machine offers a local run, as the planner's one node: CPUs (the
// affinity mask, capped by a cgroup v2 cpu.max quota), memory (MemTotal, capped by
// a cgroup v2 memory.max), and GPUs counted by NVML. NVML is loaded at run time
// with dlopen("libnvidia-ml.so.1"): no link-time dependency, and a machine without
// the library (or without a driver) has 0 GPUs.
//
// The parse* functions are the pure parts, tested on fixtures.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "rpcjob/planner/gpu_topology.h"

namespace rpcjob::runner {

struct LocalResources {
  int gpus = 0;
  int64_t cpuMilli = 0;
  int64_t memoryBytes = 0;
  std::string gpuSource;          // "NVML", "--gpus", or why there are none
  planner::GpuTopology topology;  // NVLink/PCIe per pair (gpu_topology_nvml.h); unknown if not
};

// The CPUs alone (what rpcjob-launch divides among a pod's workers: in a pod with
// a CPU limit, cpu.max is that limit).
int64_t detectCpuMilli();

// `gpuOverride` (from --gpus) replaces the NVML count (and leaves the topology unknown).
LocalResources detectLocalResources(std::optional<int> gpuOverride = std::nullopt);

// MemTotal of /proc/meminfo text, in bytes; 0 when absent.
int64_t parseMemTotal(const std::string& meminfo);
// A cgroup v2 cpu.max ("max 100000" or "150000 100000") as milli-CPUs; nullopt when unlimited
// or malformed.
std::optional<int64_t> parseCpuMax(const std::string& cpuMax);
// A cgroup v2 memory.max ("max" or bytes); nullopt when unlimited or malformed.
std::optional<int64_t> parseMemoryMax(const std::string& memoryMax);

// The kernel's ephemeral port range ("32768\t60999" of
// /proc/sys/net/ipv4/ip_local_port_range); nullopt when malformed.
std::optional<std::pair<int, int>> parsePortRange(const std::string& text);
// This machine's range; nullopt when it cannot be read.
std::optional<std::pair<int, int>> ephemeralPortRange();
// Whether ports first..first+count-1 meet `range`. Ports given by hand there can
// be taken by any outgoing connection (the workers' own to each other) before
// the worker listens: "Address already in use".
bool overlapsPortRange(int first, int count, std::pair<int, int> range);

// GPUs NVML reports; 0 with `why` set when NVML is absent or fails.
int nvmlGpuCount(std::string& why);

}  // namespace rpcjob::runner
