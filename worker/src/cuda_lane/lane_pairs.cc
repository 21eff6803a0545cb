#include "cuda_lane/lane_pairs.h"

#include "cuda/nvlink_descriptor.h"

namespace rpcjob::runtime::cuda_lane {
namespace {

// "cuda:N", N decimal without a sign or leading zeros (as c10::Device writes it).
bool cudaIndex(const std::string& device, int& index) {
  constexpr size_t kPrefix = 5;  // "cuda:"
  if (device.size() <= kPrefix || device.compare(0, kPrefix, "cuda:") != 0) return false;
  const size_t digits = device.size() - kPrefix;
  if (digits > 9 || (digits > 1 && device[kPrefix] == '0')) return false;  // int, canonical
  int v = 0;
  for (size_t i = kPrefix; i < device.size(); ++i) {
    if (device[i] < '0' || device[i] > '9') return false;
    v = v * 10 + (device[i] - '0');
  }
  index = v;
  return true;
}

// The bus id of `device`'s descriptor in `list` (its first entry), or "" when it
// has none or it does not decode.
std::string busOf(const wire::DeviceDescriptors& list, const std::string& device) {
  for (const auto& [name, text] : list) {
    if (name != device) continue;
    cuda::NvlinkDescriptor d;
    return cuda::decodeNvlinkDescriptor(text, d) ? d.bus : std::string();
  }
  return {};
}

}  // namespace

LanePairs LanePairs::from(const std::vector<PairChoice>& choices,
                          const wire::DeviceDescriptors& ours,
                          const wire::DeviceDescriptors& theirs) {
  LanePairs out;
  for (const PairChoice& c : choices) {
    int local = -1, remote = -1;
    if (c.channel != "cuda_nvlink" || !cudaIndex(c.localDevice, local) ||
        !cudaIndex(c.remoteDevice, remote)) {
      continue;
    }
    // The same bus: one GPU that two workers share (nvlink_channel.h's own wait).
    const std::string ourBus = busOf(ours, c.localDevice);
    const std::string theirBus = busOf(theirs, c.remoteDevice);
    if (ourBus.empty() || theirBus.empty() || ourBus == theirBus) continue;
    out.pairs_.emplace(local, remote);
  }
  return out;
}

}  // namespace rpcjob::runtime::cuda_lane
