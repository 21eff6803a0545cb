#include "rpcjob/runner/gpu_topology_nvml.h"

#include <dlfcn.h>

#include <algorithm>

namespace rpcjob::runner {
namespace {

// The part of nvml.h used here (NVML's ABI: nvmlPciInfo_t as of the _v3 query).
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlFeatureEnabled = 1;
constexpr unsigned int kMaxNvlinks = 18;  // NVML_NVLINK_MAX_LINKS

uint64_t keyOf(const nvmlPciInfo_t& p) {
  return (uint64_t{p.domain} << 16) | (uint64_t{p.bus & 0xff} << 8) | (p.device & 0xff);
}

std::string pathOfLevel(int level) {
  if (level <= 10) return "PIX";
  if (level <= 20) return "PXB";
  if (level <= 30) return "PHB";
  if (level <= 40) return "NODE";
  return "SYS";
}

}  // namespace

planner::GpuTopology topologyFromNvml(const std::vector<NvmlGpuLinks>& gpus) {
  const int n = static_cast<int>(gpus.size());
  std::vector<std::vector<int>> direct(n, std::vector<int>(n, 0));
  std::vector<int> switchLinks(n, 0);
  for (int i = 0; i < n; ++i) {
    for (uint64_t remote : gpus[i].nvlinkRemote) {
      int j = -1;
      for (int k = 0; k < n; ++k) {
        if (k != i && gpus[k].pci == remote) j = k;
      }
      if (j >= 0) {
        ++direct[i][j];
      } else if (remote != gpus[i].pci) {
        ++switchLinks[i];
      }
    }
  }
  planner::GpuTopology t;
  t.gpus = n;
  t.links.assign(n, std::vector<planner::GpuLink>(n));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      planner::GpuLink& link = t.links[i][j];
      if (i == j) {
        link = {0, "X"};
        continue;
      }
      // Each end counts a direct link: they agree, the smaller is safe if not.
      link.nvlinks = std::min(direct[i][j], direct[j][i]);
      if (switchLinks[i] > 0 && switchLinks[j] > 0) {
        link.nvlinks += std::min(switchLinks[i], switchLinks[j]);
      }
      if (link.nvlinks > 0) {
        link.path = "NV" + std::to_string(link.nvlinks);
      } else {
        // The nearer of the two ends' answers (they agree on a healthy host).
        auto level = [&](int a, int b) {
          const auto& v = gpus[a].commonAncestor;
          return b < static_cast<int>(v.size()) ? v[b] : 50;
        };
        link.path = pathOfLevel(std::min(level(i, j), level(j, i)));
      }
    }
  }
  return t;
}

planner::GpuTopology nvmlGpuTopology(std::string& why) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml) {
    why = "no NVML (libnvidia-ml.so.1 not found)";
    return {};
  }
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned int*);
  using HandleFn = int (*)(unsigned int, nvmlDevice_t*);
  using PciFn = int (*)(nvmlDevice_t, nvmlPciInfo_t*);
  using StateFn = int (*)(nvmlDevice_t, unsigned int, int*);
  using RemotePciFn = int (*)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*);
  using AncestorFn = int (*)(nvmlDevice_t, nvmlDevice_t, int*);
  auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlShutdown"));
  auto count = reinterpret_cast<CountFn>(dlsym(nvml, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<HandleFn>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto pci = reinterpret_cast<PciFn>(dlsym(nvml, "nvmlDeviceGetPciInfo_v3"));
  auto state = reinterpret_cast<StateFn>(dlsym(nvml, "nvmlDeviceGetNvLinkState"));
  auto remotePci =
      reinterpret_cast<RemotePciFn>(dlsym(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  auto ancestor = reinterpret_cast<AncestorFn>(dlsym(nvml, "nvmlDeviceGetTopologyCommonAncestor"));
  planner::GpuTopology topology;
  if (!init || !count || !handle || !pci) {
    why = "NVML lacks the device queries";
  } else if (init() != kNvmlSuccess) {
    why = "nvmlInit_v2 failed";
  } else {
    unsigned int n = 0;
    std::vector<nvmlDevice_t> devices;
    std::vector<NvmlGpuLinks> gpus;
    bool ok = count(&n) == kNvmlSuccess;
    for (unsigned int i = 0; ok && i < n; ++i) {
      nvmlDevice_t d = nullptr;
      nvmlPciInfo_t info{};
      ok = handle(i, &d) == kNvmlSuccess && pci(d, &info) == kNvmlSuccess;
      devices.push_back(d);
      NvmlGpuLinks g;
      g.pci = keyOf(info);
      for (unsigned int link = 0; ok && state && remotePci && link < kMaxNvlinks; ++link) {
        int active = 0;
        nvmlPciInfo_t remote{};
        if (state(d, link, &active) != kNvmlSuccess || active != kNvmlFeatureEnabled) continue;
        if (remotePci(d, link, &remote) == kNvmlSuccess) g.nvlinkRemote.push_back(keyOf(remote));
      }
      gpus.push_back(std::move(g));
    }
    for (unsigned int i = 0; ok && i < n; ++i) {
      for (unsigned int j = 0; j < n; ++j) {
        int level = i == j ? 0 : 50;
        if (i != j && ancestor && ancestor(devices[i], devices[j], &level) != kNvmlSuccess) {
          level = 50;
        }
        gpus[i].commonAncestor.push_back(level);
      }
    }
    if (ok) {
      topology = topologyFromNvml(gpus);
      topology.source = "NVML";
      why = "NVML";
    } else {
      why = "NVML device queries failed";
    }
    if (shutdown) shutdown();
  }
  dlclose(nvml);
  return topology;
}

}  // namespace rpcjob::runner
