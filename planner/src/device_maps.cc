#include "detail/device_maps.h"

#include "rpcjob/api/devices.h"

namespace rpcjob::planner::detail {

DeviceMapTable explicitDeviceMaps(const std::vector<WorkerPlacement>& workers,
                                  const api::DeviceMaps& spec) {
  // Validated: known GPU workers, devices in range, one-to-one, consistent with
  // the reverse map when both are given.
  std::map<std::string, const WorkerPlacement*> byName;
  for (const auto& w : workers) byName[w.name] = &w;
  DeviceMapTable table;
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
    table[m.from][m.to] = std::move(map);
  }
  return table;
}

DeviceMapMode deviceMapMode(const api::DeviceMaps& spec) {
  return spec.mode == api::DeviceMapMode::Auto ? DeviceMapMode::Auto : DeviceMapMode::Explicit;
}

}  // namespace rpcjob::planner::detail
