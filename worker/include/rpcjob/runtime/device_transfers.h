#pragma once
// The seam through which the instrumentation counts the CUDA tensors that no
// TensorPipe channel moves: those two workers on one host trade as IPC
// handles in their shared-memory lane's frames (worker/src/cuda_lane/). They
// are reported as transfers of the channel kLaneChannel, beside TensorPipe's
// channels, so that per-channel metrics still add up to what moved.
// RuntimeOptions::hooks.deviceTransfers; none: nothing is reported.

#include <cstddef>
#include <cstdint>
#include <string>

namespace rpcjob::runtime {

inline constexpr const char* kLaneChannel = "cuda_lane";

struct DeviceTransfer {
  bool send = true;  // a tensor of ours the peer pulls (send), or one we pull (recv)
  std::string peer;  // the other worker's name
  int localDevice = -1;
  int remoteDevice = -1;
  std::size_t bytes = 0;
  void* ptr = nullptr;     // our memory
  void* stream = nullptr;  // a cudaStream_t: the send's, or the one the recv's copy runs on
};

// Thread-safe: called on the runtime's threads, concurrently.
class DeviceTransferObserver {
 public:
  virtual ~DeviceTransferObserver() = default;
  // Before the transfer (nothing enqueued for it yet on `stream`): a token.
  virtual std::uint64_t started(const DeviceTransfer& transfer) noexcept = 0;
  // A recv once its copy is enqueued on its stream; a send once the peer
  // answered that it copied (`ok`), or failed to (the lane ended first).
  virtual void finished(std::uint64_t token, bool ok) noexcept = 0;
  // The transfer did not happen this way (the lane's ring was full: the
  // tensors went through TensorPipe's channel, which counts them): no count.
  virtual void cancelled(std::uint64_t token) noexcept = 0;
};

}  // namespace rpcjob::runtime
