#include "rpcjob/api/devices.h"

namespace rpcjob::api {

std::optional<int> parseCudaDevice(const std::string& device) {
  const std::string prefix = "cuda:";
  if (device.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string index = device.substr(prefix.size());
  if (index.empty() || index.size() > 4) return std::nullopt;
  for (char c : index) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (index.size() > 1 && index[0] == '0') return std::nullopt;
  return std::stoi(index);
}

std::string cudaDevice(int index) {
  return "cuda:" + std::to_string(index);
}

}  // namespace rpcjob::api
