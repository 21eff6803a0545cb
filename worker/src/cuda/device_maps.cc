#include "device_maps.h"

#include <set>
#include <stdexcept>

#include "rpcjob/runtime/errors.h"

namespace rpcjob::runtime::cuda {
namespace {

const std::string kCountKey = "devices";
const std::string kMapPrefix = "map:";

std::string encodeMap(const DeviceMap& map) {
  std::string out;
  for (const auto& [from, to] : map) {
    if (!out.empty()) out += ";";
    out += from + "=" + to;
  }
  return out;
}

DeviceMap decodeMap(const std::string& text) {
  DeviceMap out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    size_t eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
    start = end + 1;
  }
  return out;
}

const wire::DeviceDescriptors* findEntry(const wire::ChannelDescriptors& remote) {
  for (const auto& [name, entries] : remote) {
    if (name == DeviceMapTable::kHandshakeEntry) return &entries;
  }
  return nullptr;
}

RpcError invalid(const std::string& peer, const std::string& message) {
  return RpcError(ErrorCode::kInvalidArgument, peer, message);
}

// `peer`'s entry, else an empty one (no map): no device may be sent to it.
std::shared_ptr<const DeviceTargets> entryOrEmpty(
    const std::map<std::string, std::shared_ptr<const DeviceTargets>>& table,
    const std::string& peer, const char* direction) {
  auto it = table.find(peer);
  if (it != table.end()) return it->second;
  auto empty = std::make_shared<DeviceTargets>();
  empty->peer = peer;
  empty->direction = direction;
  return empty;
}

}  // namespace

int parseDevice(const std::string& device) {
  if (device == "cpu") return -1;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() < 9) {
    int index = 0;
    for (size_t i = 5; i < device.size(); ++i) {
      if (device[i] < '0' || device[i] > '9') throw std::invalid_argument(device);
      index = index * 10 + (device[i] - '0');
    }
    return index;
  }
  throw std::invalid_argument(device);
}

std::string deviceName(int device) {
  return device < 0 ? std::string("cpu") : "cuda:" + std::to_string(device);
}

void DeviceMapTable::init(const std::string& self, const std::vector<std::string>& workers,
                          const std::map<std::string, DeviceMap>& maps, int localCudaDevices) {
  self_ = self;
  localCount_ = localCudaDevices;
  raw_ = maps;
  std::set<std::string> known(workers.begin(), workers.end());
  for (const auto& [peer, map] : maps) {
    if (peer == self) {
      throw invalid(peer, "worker '" + self + "' has a device map to itself");
    }
    if (!known.count(peer)) {
      throw invalid(peer, "worker '" + self + "' has a device map for '" + peer +
                              "', which is not a worker of this job");
    }
    auto targets = std::make_shared<DeviceTargets>();
    targets->peer = peer;
    targets->direction = "request";
    std::map<int, std::string> seen;  // remote device -> local device
    for (const auto& [from, to] : map) {
      int local = 0;
      int remote = 0;
      try {
        local = parseDevice(from);
        remote = parseDevice(to);
      } catch (const std::invalid_argument& e) {
        throw invalid(peer, "device map from '" + self + "' to '" + peer + "': bad device '" +
                                e.what() + "' (devices are \"cpu\" or \"cuda:N\")");
      }
      if (local >= localCudaDevices) {
        throw invalid(peer, "device map from '" + self + "' to '" + peer + "' names local device " +
                                from + ", but '" + self + "' has " +
                                std::to_string(localCudaDevices) + " CUDA device(s)");
      }
      auto [it, fresh] = seen.emplace(remote, from);
      if (!fresh) {
        throw invalid(peer, "device map from '" + self + "' to '" + peer + "' maps both " +
                                it->second + " and " + from + " to " + to + " on '" + peer +
                                "' (device maps must be one-to-one)");
      }
      targets->map[local] = remote;
    }
    requests_[peer] = std::move(targets);
  }
  std::lock_guard<std::mutex> lock(mu_);
  workerCount_ = static_cast<int>(workers.size());
  requestsByRank_ = std::make_unique<std::atomic<const DeviceTargets*>[]>(workers.size());
  responsesByRank_ = std::make_unique<std::atomic<const DeviceTargets*>[]>(workers.size());
  for (int rank = 0; rank < workerCount_; ++rank) {
    const std::string& name = workers[rank];
    ranks_[name] = rank;
    // Every worker gets its entries now, empty ones included: made anew for
    // each message, an empty one was an allocation and two strings on every
    // call and every answer of the CUDA build, CPU-only ones included.
    publish(requests_, requestsByRank_, name, entryOrEmpty(requests_, name, "request"));
    publish(responses_, responsesByRank_, name, entryOrEmpty(responses_, name, "response"));
  }
}

void DeviceMapTable::publish(Table& table, Slots& slots, const std::string& peer,
                             std::shared_ptr<const DeviceTargets> targets) {
  auto rank = ranks_.find(peer);
  if (rank != ranks_.end()) slots[rank->second].store(targets.get(), std::memory_order_release);
  published_.push_back(targets);
  table[peer] = std::move(targets);
}

void DeviceMapTable::appendHandshake(wire::ChannelDescriptors& out) const {
  wire::DeviceDescriptors entries;
  entries.emplace_back(kCountKey, std::to_string(localCount_));
  for (const auto& [peer, map] : raw_) entries.emplace_back(kMapPrefix + peer, encodeMap(map));
  out.emplace_back(kHandshakeEntry, std::move(entries));
}

std::string DeviceMapTable::onCalleeDescriptors(const std::string& peer,
                                                const wire::ChannelDescriptors& remote) {
  const wire::DeviceDescriptors* entry = findEntry(remote);
  int remoteCount = 0;
  if (entry != nullptr) {
    for (const auto& [key, value] : *entry) {
      if (key == kCountKey) remoteCount = std::atoi(value.c_str());
    }
  }
  return onPeerDeviceCount(peer, remoteCount);
}

std::string DeviceMapTable::onPeerDeviceCount(const std::string& peer, int remoteCount) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(peer);
  if (it == requests_.end()) return {};
  for (const auto& [local, target] : it->second->map) {
    if (target >= remoteCount) {
      auto bad = std::make_shared<DeviceTargets>(*it->second);
      bad->error = "device map from '" + self_ + "' to '" + peer + "' maps " + deviceName(local) +
                   " to " + deviceName(target) + ", but '" + peer + "' has " +
                   std::to_string(remoteCount) + " CUDA device(s)";
      publish(requests_, requestsByRank_, peer, bad);
      return bad->error;
    }
  }
  return {};
}

void DeviceMapTable::onCallerDescriptors(const std::string& caller,
                                         const wire::ChannelDescriptors& remote) {
  auto targets = std::make_shared<DeviceTargets>();
  targets->peer = caller;
  targets->direction = "response";
  if (const wire::DeviceDescriptors* entry = findEntry(remote)) {
    for (const auto& [key, value] : *entry) {
      if (key != kMapPrefix + self_) continue;
      for (const auto& [from, to] : decodeMap(value)) {
        try {
          targets->map[parseDevice(to)] = parseDevice(from);  // inverse
        } catch (const std::invalid_argument&) {
          targets->error = "the device map of '" + caller + "' to '" + self_ + "' is malformed";
        }
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  publish(responses_, responsesByRank_, caller, std::move(targets));
}

std::shared_ptr<const DeviceTargets> DeviceMapTable::forRequest(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entryOrEmpty(requests_, peer, "request");
}

std::shared_ptr<const DeviceTargets> DeviceMapTable::forResponse(const std::string& caller) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entryOrEmpty(responses_, caller, "response");
}

}  // namespace rpcjob::runtime::cuda
