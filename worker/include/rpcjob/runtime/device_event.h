#pragma once
// The CUDA seam of futures (RFC pytorch#48305, in ../shared/seeds). A CUDA build
// records one DeviceEvent per device that a future's tensors live on, after the
// transfer into them was enqueued; the CPU build never creates any.
//   Future::wait()            -> synchronize() on every event (host blocks)
//   Future::waitOnStreams()   -> blockCurrentStream() (host does not block)
// A CUDA implementation wraps at::cuda::CUDAEvent behind this interface so that
// public headers stay free of CUDA.

#include <string>

namespace rpcjob::runtime {

class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual std::string device() const = 0;  // "cuda:N"
  virtual void synchronize() = 0;
  virtual void blockCurrentStream() = 0;
};

}  // namespace rpcjob::runtime
