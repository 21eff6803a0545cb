#pragma once
// Which pairs of devices a lane may carry CUDA tensors for, as IPC handles in
// its frames (cuda_lane.h): those for which TensorPipe would pick rpcjob's
// cuda_nvlink (the same host, different processes, peer access: its checks
// held in the handshake), on two different GPUs. A GPU that two workers share
// is left to cuda_nvlink's own protocol (a host-side wait, nvlink_channel.h),
// and so is every pair for which another channel was chosen. Pure: decided
// from the handshake's choices and cuda_nvlink's device descriptors
// (nvlink_descriptor.h), tested without a GPU.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "header_codec.h"

namespace rpcjob::runtime::cuda_lane {

// One device pair's channel, as the handshake chose it ("cuda:0", "cuda:1",
// "cuda_nvlink").
struct PairChoice {
  std::string localDevice;
  std::string remoteDevice;
  std::string channel;
};

class LanePairs {
 public:
  LanePairs() = default;
  // `ours` and `theirs`: cuda_nvlink's (device, descriptor) entries of each
  // side's handshake descriptors. A pair is allowed when its choice is
  // cuda_nvlink and both descriptors decode and name different PCI bus ids.
  static LanePairs from(const std::vector<PairChoice>& choices, const wire::DeviceDescriptors& ours,
                        const wire::DeviceDescriptors& theirs);
  // Local CUDA index -> the peer's CUDA index.
  bool allows(int local, int remote) const { return pairs_.count({local, remote}) != 0; }
  bool empty() const { return pairs_.empty(); }

 private:
  std::set<std::pair<int, int>> pairs_;
};

}  // namespace rpcjob::runtime::cuda_lane
