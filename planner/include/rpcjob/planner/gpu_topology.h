#pragma once
// How the GPUs of one host reach each other (NVLink, directly or through NVSwitch,
// versus PCIe), and the order to hand them to a node's workers so that neighbours
// (consecutive ranks, which the device maps and pipelines join) get NVLink-joined
// GPUs. Pure: the NVML query that fills a GpuTopology lives at the edge (the
// runner's local_machine.cc); a recorded `nvidia-smi topo -m` matrix fills one too
// (parseTopoMatrix), which is how the logic is tested and how `rpcjob plan
// --gpu-topology` replays another host.

#include <optional>
#include <string>
#include <vector>

namespace rpcjob::planner {

struct GpuLink {
  int nvlinks = 0;   // NVLinks joining the pair (NV# in nvidia-smi topo -m), 0: none
  std::string path;  // what nvidia-smi prints: "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"
  bool nvlink() const { return nvlinks > 0; }
};

struct GpuTopology {
  int gpus = 0;
  std::vector<std::vector<GpuLink>> links;  // [i][j], i != j; [i][i] is "X"
  std::string source;                       // "NVML", a file name, ... (for plans)

  bool known() const { return gpus > 0; }
  bool nvlinkBetween(int a, int b) const;
};

// A `nvidia-smi topo -m` matrix (the GPU rows and columns; NIC columns, affinity
// columns, the legend and terminal escapes are ignored). nullopt with `error` set
// when it is not one.
std::optional<GpuTopology> parseTopoMatrix(const std::string& text, std::string& error);

// One line per NVLink-joined pair, else "no NVLink between its GPUs" (plans show it).
std::string describeTopology(const GpuTopology& topology);

// `count` distinct GPUs of the host, in the order to hand them out: the order that
// joins the most consecutive pairs by NVLink (more links first), then the smallest
// indices, so an all-NVLink (NVSwitch) host or an unknown topology keeps 0, 1, 2, ...
// Exact for hosts of up to 8 GPUs; larger ones are ordered greedily. count is
// clamped to [0, gpus]; an unknown topology gives 0..count-1.
std::vector<int> neighbourOrder(const GpuTopology& topology, int count);

// How many consecutive pairs of `order` are NVLink-joined.
int nvlinkNeighbours(const GpuTopology& topology, const std::vector<int>& order);

}  // namespace rpcjob::planner
