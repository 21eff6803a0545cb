#include "rpcjob/assignment/pair_links.h"

#include <algorithm>
#include <array>

namespace rpcjob {
namespace {

// The candidates the job allows, in the job's order when it gives one.
std::vector<std::string> allowed(const std::vector<std::string>& candidates,
                                 const std::vector<std::string>& spec) {
  if (spec.empty()) return candidates;
  std::vector<std::string> out;
  for (const auto& name : spec) {
    if (std::find(candidates.begin(), candidates.end(), name) != candidates.end()) {
      out.push_back(name);
    }
  }
  return out;
}

const WorkerEntry& entryOf(const Assignment& table, const std::string& worker) {
  const WorkerEntry* w = table.byName(worker);
  if (w == nullptr) throw AssignmentError("assignment: no worker named '" + worker + "'");
  return *w;
}

// linkFor for the eight kinds of pair, computed once per row.
class LinkCache {
 public:
  explicit LinkCache(const Assignment& table) : table_(table) {}
  const PairLink& get(const PairPlace& p) {
    const int key = (p.samePod ? 4 : 0) + (p.bothRdma ? 2 : 0) + (p.bothGpus ? 1 : 0);
    if (!known_[key]) {
      links_[key] = linkFor(p, table_.transports, table_.channels);
      known_[key] = true;
    }
    return links_[key];
  }

 private:
  const Assignment& table_;
  std::array<PairLink, 8> links_;
  std::array<bool, 8> known_{};
};

DeviceMap derivedMap(const Assignment& table, const WorkerEntry& from, const WorkerEntry& to,
                     bool hasCudaChannel) {
  if (const auto it = from.explicitDeviceMaps.find(to.name); it != from.explicitDeviceMaps.end()) {
    return it->second;
  }
  if (const auto it = to.explicitDeviceMaps.find(from.name); it != to.explicitDeviceMaps.end()) {
    DeviceMap inverse;
    for (const auto& [local, remote] : it->second) inverse[remote] = local;
    return inverse;
  }
  DeviceMap map;
  if (table.deviceMapMode != DeviceMapMode::Auto || !hasCudaChannel) return map;
  const std::size_t n = std::min(from.gpus.size(), to.gpus.size());
  for (std::size_t k = 0; k < n; ++k) {
    map["cuda:" + std::to_string(from.gpus[k])] = "cuda:" + std::to_string(to.gpus[k]);
  }
  return map;
}

}  // namespace

bool PairLink::uses(const std::string& name) const {
  return std::find(transports.begin(), transports.end(), name) != transports.end() ||
         std::find(channels.begin(), channels.end(), name) != channels.end();
}

PairLink linkFor(const PairPlace& place, const std::vector<std::string>& transports,
                 const std::vector<std::string>& channels) {
  std::vector<std::string> candidateTransports;
  std::vector<std::string> cpu;
  std::vector<std::string> cuda;
  if (place.samePod) {
    candidateTransports = {"shm", "uv"};
    cpu = {"rpcjob_cma", "cma", "basic"};
    cuda = {"cuda_nvlink", "cuda_ipc", "cuda_basic"};
  } else {
    candidateTransports =
        place.bothRdma ? std::vector<std::string>{"ibv", "uv"} : std::vector<std::string>{"uv"};
    cpu = {"mpt", "basic"};
    cuda = place.bothRdma ? std::vector<std::string>{"cuda_gdr", "cuda_basic"}
                          : std::vector<std::string>{"cuda_basic"};
  }
  PairLink link;
  link.transports = allowed(candidateTransports, transports);
  const auto cpuAllowed = allowed(cpu, channels);
  const auto cudaAllowed = place.bothGpus ? allowed(cuda, channels) : std::vector<std::string>{};
  link.hasCpuChannel = !cpuAllowed.empty();
  link.hasCudaChannel = !cudaAllowed.empty();
  // One list in priority order: the job's order when it names channels, else CUDA
  // first (the pair's fast path when it has GPUs), then CPU.
  std::vector<std::string> all = cudaAllowed;
  all.insert(all.end(), cpuAllowed.begin(), cpuAllowed.end());
  link.channels = channels.empty() ? all : allowed(all, channels);
  return link;
}

PairPlace placeOf(const Assignment& table, const WorkerEntry& a, const WorkerEntry& b) {
  PairPlace p;
  // Local runs have no pods: the workers of one machine share what a pod would.
  p.samePod = a.pod.empty() && b.pod.empty() ? a.node == b.node : a.pod == b.pod;
  p.bothRdma = table.linksOf(a.node).rdma && table.linksOf(b.node).rdma;
  p.bothGpus = !a.gpus.empty() && !b.gpus.empty();
  return p;
}

PairLink linkBetween(const Assignment& table, const WorkerEntry& a, const WorkerEntry& b) {
  return linkFor(placeOf(table, a, b), table.transports, table.channels);
}

DeviceMap deviceMapBetween(const Assignment& table, const WorkerEntry& from,
                           const WorkerEntry& to) {
  const PairPlace place = placeOf(table, from, to);
  const bool cuda =
      place.bothGpus && linkFor(place, table.transports, table.channels).hasCudaChannel;
  return derivedMap(table, from, to, cuda);
}

std::map<std::string, DeviceMap> deviceMapsOf(const Assignment& table, const std::string& worker) {
  const WorkerEntry& self = entryOf(table, worker);
  std::map<std::string, DeviceMap> out;
  LinkCache links(table);
  for (const auto& peer : table.workers) {
    if (peer.name == self.name) continue;
    const PairPlace place = placeOf(table, self, peer);
    DeviceMap map =
        derivedMap(table, self, peer, place.bothGpus && links.get(place).hasCudaChannel);
    if (!map.empty()) out.emplace(peer.name, std::move(map));
  }
  return out;
}

std::map<std::string, std::vector<std::string>> channelsOf(const Assignment& table,
                                                           const std::string& worker) {
  const WorkerEntry& self = entryOf(table, worker);
  std::map<std::string, std::vector<std::string>> out;
  LinkCache links(table);
  for (const auto& peer : table.workers) {
    if (peer.name != self.name)
      out.emplace(peer.name, links.get(placeOf(table, self, peer)).channels);
  }
  return out;
}

}  // namespace rpcjob
