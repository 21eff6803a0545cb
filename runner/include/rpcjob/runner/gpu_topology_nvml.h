#pragma once
// This machine's GPU topology from NVML (loaded with dlopen, like the GPU count in
// local_machine.h: a CPU-only machine needs no NVML): per pair of GPUs, the NVLinks
// joining them (direct, or through NVSwitch) or the PCIe path between them.
// topologyFromNvml is the pure part, tested on recorded link lists.

#include <cstdint>
#include <string>
#include <vector>

#include "rpcjob/planner/gpu_topology.h"

namespace rpcjob::runner {

// What NVML says about one GPU.
struct NvmlGpuLinks {
  uint64_t pci = 0;                    // (domain << 16) | (bus << 8) | device
  std::vector<uint64_t> nvlinkRemote;  // per active NVLink, the remote end's pci key
  std::vector<int> commonAncestor;     // per GPU j, nvmlGpuTopologyLevel_t (0: self)
};

// Links to another GPU's pci key count for that pair; links to anything else are
// NVSwitch links, and two GPUs that both have some reach each other through the
// switch with the fewer of their counts (nvidia-smi prints NV18 on an HGX H100).
// PCIe paths by NVML level: 10 PIX, 20 PXB, 30 PHB, 40 NODE, 50 SYS.
planner::GpuTopology topologyFromNvml(const std::vector<NvmlGpuLinks>& gpus);

// The topology NVML reports (source "NVML"); unknown, with `why`, when NVML is
// absent or fails.
planner::GpuTopology nvmlGpuTopology(std::string& why);

}  // namespace rpcjob::runner
