#include "nvlink_descriptor.h"

#include <cstdlib>
#include <sstream>

namespace rpcjob::runtime::cuda {
namespace {

bool parseInt(const std::string& text, int& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0') return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace

std::string encodeNvlinkDescriptor(const NvlinkDescriptor& d) {
  std::string out = d.boot + "|" + std::to_string(d.pid) + "|" + d.bus + "|";
  for (size_t i = 0; i < d.peers.size(); ++i) out += (i ? "," : "") + d.peers[i];
  return out + "|" + std::to_string(d.index);
}

bool decodeNvlinkDescriptor(const std::string& text, NvlinkDescriptor& d) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, '|')) parts.push_back(part);
  if (parts.size() < 3) return false;
  NvlinkDescriptor out;
  out.boot = parts[0];
  if (!parseInt(parts[1], out.pid)) return false;
  out.bus = parts[2];
  if (parts.size() > 3) {
    std::stringstream peers(parts[3]);
    while (std::getline(peers, part, ',')) out.peers.push_back(part);
  }
  if (parts.size() > 4 && !parseInt(parts[4], out.index)) return false;
  d = std::move(out);
  return true;
}

void PeerGpus::learn(const NvlinkDescriptor& d) {
  if (d.index < 0 || d.bus.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  buses_[{d.pid, d.index}] = d.bus;
}

std::optional<std::string> PeerGpus::busOf(int pid, int index) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buses_.find({pid, index});
  if (it == buses_.end()) return std::nullopt;
  return it->second;
}

}  // namespace rpcjob::runtime::cuda
