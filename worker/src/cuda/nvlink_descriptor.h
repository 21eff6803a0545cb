#pragma once
// What cuda_nvlink tells a peer about each of its GPUs (the TensorPipe device
// descriptor), and what a receiver learns from the peers' descriptors: which GPU a
// sender's device index is. Pure logic, no CUDA: tested on any machine.
//
// Why the receiver needs it: whether a sender's allocation lives on the
// receiver's own GPU decides the protocol (nvlink_channel.h). The pointer
// attribute of an allocation opened by IPC names the device of the context that
// opened it, not the one that holds the memory: on 2 x H200 every cross-GPU
// transfer took the one-GPU protocol (host waits for the peer's events), seen in
// RPCJOB_TRACE's nvlink.ready steps of a cuda:0 -> cuda:1 round trip.

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rpcjob::runtime::cuda {

struct NvlinkDescriptor {
  std::string boot;                // the host's boot id: same host
  int pid = 0;                     // the process
  std::string bus;                 // this GPU's PCI bus id
  std::vector<std::string> peers;  // the bus ids this GPU has peer access to
  int index = -1;                  // this GPU's CUDA index in its process; -1: not sent
};

// "boot|pid|bus|peer,peer|index". Peers that predate `index` send four fields
// (or three, without peers) and read only those.
std::string encodeNvlinkDescriptor(const NvlinkDescriptor& d);
// False for text that is not a descriptor (fewer than three fields, a pid or index
// that is not a number).
bool decodeNvlinkDescriptor(const std::string& text, NvlinkDescriptor& d);

// The GPUs of the processes whose descriptors were seen: (pid, CUDA index in that
// process) -> PCI bus id. Thread safe.
class PeerGpus {
 public:
  void learn(const NvlinkDescriptor& d);
  // The bus id of `pid`'s GPU `index`, when a descriptor of it was seen.
  std::optional<std::string> busOf(int pid, int index) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int, int>, std::string> buses_;
};

}  // namespace rpcjob::runtime::cuda
