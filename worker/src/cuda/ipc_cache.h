#pragma once
// The CUDA IPC handles a process trades with its peers on one host (CUDA build
// only): the memory it exports and the peers' memory and events it opened, and
// its own interprocess events. Shared by cuda_nvlink (nvlink_channel.cc) and
// CUDA tensors carried over a lane (../cuda_lane/): a process maps a peer's
// allocation once (CUDA refuses to open one handle twice), so both ask here.
//
// One instance at a time per process (sharedIpcCache()): it lives while a
// channel context or a runtime holds it, and closes what it opened when the
// last of them lets go.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "nvlink_descriptor.h"

namespace rpcjob::runtime::cuda {

// The sender's view of the allocation that holds a tensor.
struct ExportedMemory {
  uint64_t base = 0;      // the allocation's base address
  uint64_t bufferId = 0;  // CUDA's id of it (never reused in a process)
  uint64_t offset = 0;    // of the tensor in it
  cudaIpcMemHandle_t handle{};
};

// A peer's allocation, as its sender described it.
struct PeerMemory {
  int pid = 0;
  int device = 0;  // the sender's CUDA index
  uint64_t base = 0;
  uint64_t bufferId = 0;
  cudaIpcMemHandle_t handle{};
};

class IpcCache {
 public:
  IpcCache();
  ~IpcCache();
  IpcCache(const IpcCache&) = delete;
  IpcCache& operator=(const IpcCache&) = delete;

  // The IPC handle of the allocation holding `ptr` (on `device`), cached per
  // (base, buffer id) so a freed and reused address is never served stale.
  bool exportMemory(const void* ptr, int device, ExportedMemory& out, std::string& error);
  // The receiver's mapping of a peer's allocation on `device` (opened once,
  // cached); `sameGpu`: the allocation lives on `device` itself; `bytes`: its
  // size, which a copy out of it must stay within (a peer's offset and length
  // are untrusted, and a copy past a mapping's end fails the whole context).
  void* openMemory(const PeerMemory& m, int device, bool& sameGpu, uint64_t& bytes,
                   std::string& error);
  // A peer's interprocess event, opened once per (handle, device).
  cudaEvent_t openEvent(const cudaIpcEventHandle_t& handle, int device, std::string& error);

  // "Ready" events (a sender's: held until the receiver's answer), by slot.
  size_t takeReady(int device, cudaEvent_t& event, cudaIpcEventHandle_t& handle);
  void releaseReady(int device, size_t slot);
  // "Done" events (a receiver's), for copies on `stream`: a ring per stream.
  // A slot recorded again before the sender waited on it only makes the
  // sender wait longer, as the later record on the same stream follows the
  // earlier one; on another stream it could come first (a ring per device,
  // shared by every stream, could let a sender reuse memory still read).
  void takeDone(int device, cudaStream_t stream, cudaEvent_t& event, cudaIpcEventHandle_t& handle);

  // The peers' GPUs, from their cuda_nvlink descriptors (the handshake).
  void learn(const NvlinkDescriptor& d) { peerGpus_.learn(d); }
  int deviceCount() const { return static_cast<int>(buses_.size()); }
  const std::string& bus(int device) const { return buses_[device]; }

 private:
  struct Opened {
    void* ptr;
    uint64_t bufferId;
    int device;
    bool sameGpu;
    uint64_t bytes;
  };
  struct EventPool;

  std::vector<std::string> buses_;  // PCI bus id by CUDA index, this process's GPUs
  PeerGpus peerGpus_;
  bool sameGpuByPointer_ = false;  // RPCJOB_NVLINK_SAME_GPU_BY=pointer
  std::mutex mu_;
  std::map<std::pair<int, uint64_t>, Opened> opened_;
  std::map<std::pair<uint64_t, uint64_t>, cudaIpcMemHandle_t> exported_;
  std::map<std::string, cudaEvent_t> remoteEvents_;
  std::vector<std::unique_ptr<EventPool>> readyEvents_;
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<EventPool>> doneEvents_;
};

// The process's instance: the live one, or a new one when none is held.
std::shared_ptr<IpcCache> sharedIpcCache();

}  // namespace rpcjob::runtime::cuda
