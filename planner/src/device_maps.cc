#include <algorithm>

#include "detail/device_maps.h"
#include "rpcjob/api/devices.h"

namespace rpcjob::planner::detail {
namespace {

void setPair(DeviceMapTable& table, const std::string& a, const std::string& b, DeviceMap map) {
  DeviceMap inverse;
  for (const auto& [from, to] : map) inverse[to] = from;
  table[a][b] = std::move(map);
  table[b][a] = std::move(inverse);
}

}  // namespace

DeviceMapTable deviceMaps(const std::vector<WorkerPlacement>& workers,
                          const std::vector<std::vector<bool>>& cudaPairs,
                          const api::DeviceMaps& spec) {
  DeviceMapTable table;
  if (spec.mode == api::DeviceMapMode::Auto) {
    // The k-th GPU of one worker to the k-th GPU of the other: one-to-one, and the
    // same rule read backwards gives the inverse.
    for (std::size_t i = 0; i < workers.size(); ++i) {
      for (std::size_t j = i + 1; j < workers.size(); ++j) {
        const auto& a = workers[i];
        const auto& b = workers[j];
        if (a.gpus.empty() || b.gpus.empty() || !cudaPairs[i][j]) continue;
        DeviceMap map;
        const std::size_t n = std::min(a.gpus.size(), b.gpus.size());
        for (std::size_t k = 0; k < n; ++k) {
          map[api::cudaDevice(a.gpus[k])] = api::cudaDevice(b.gpus[k]);
        }
        setPair(table, a.name, b.name, std::move(map));
      }
    }
  }
  // Explicit maps (validated: known GPU workers, devices in range, one-to-one,
  // consistent with the reverse map when both are given).
  std::map<std::string, const WorkerPlacement*> byName;
  for (const auto& w : workers) byName[w.name] = &w;
  for (const auto& m : spec.maps) {
    const auto from = byName.find(m.from);
    const auto to = byName.find(m.to);
    if (from == byName.end() || to == byName.end()) continue;
    DeviceMap map;
    for (const auto& [local, remote] : m.devices) {
      const auto l = api::parseCudaDevice(local);
      const auto r = api::parseCudaDevice(remote);
      if (!l || !r || *l >= static_cast<int>(from->second->gpus.size()) ||
          *r >= static_cast<int>(to->second->gpus.size())) {
        continue;
      }
      map[api::cudaDevice(from->second->gpus[*l])] = api::cudaDevice(to->second->gpus[*r]);
    }
    setPair(table, m.from, m.to, std::move(map));
  }
  return table;
}

}  // namespace rpcjob::planner::detail
