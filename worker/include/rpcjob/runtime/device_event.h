#pragma once
// The CUDA seam of futures (RFC pytorch#48305, in ../shared/seeds). A CUDA build
// records one DeviceEvent per device that a future's tensors live on, after the
// transfer into them was enqueued; the CPU build never creates any.
//   Future::wait()            -> synchronize() on every event (host blocks)
//   Future::waitOnStreams()   -> blockCurrentStream() (host does not block)
//   Future::then(fn)          -> fn runs with pool streams, made current by
//                                enterPoolStream(), that wait on the events; the
//                                returned future's events are recorded on them
//                                after fn (recordOnCurrentStream()).
// The CUDA implementation (worker/src/cuda/cuda_future.cc) wraps
// at::cuda::CUDAEvent behind this interface so that public headers stay free of
// CUDA. No method synchronizes a whole device.

#include <memory>
#include <string>

namespace rpcjob::runtime {

class DeviceEvent {
 public:
  // Restores the thread's previous current stream when destroyed.
  class StreamScope {
   public:
    virtual ~StreamScope() = default;
  };

  virtual ~DeviceEvent() = default;
  virtual std::string device() const = 0;  // "cuda:N"
  // The host waits until the event occurred (cudaEventSynchronize).
  virtual void synchronize() = 0;
  // The calling thread's current stream on this device waits for the event
  // (cudaStreamWaitEvent); the host does not block.
  virtual void blockCurrentStream() = 0;
  // Takes a stream from the pool of this device, makes it wait for the event and
  // makes it the calling thread's current stream until the scope is destroyed.
  virtual std::unique_ptr<StreamScope> enterPoolStream() = 0;
  // A new event of the same device recorded on the calling thread's current
  // stream (for the future that a `then` callback produces).
  virtual std::shared_ptr<DeviceEvent> recordOnCurrentStream() const = 0;
};

}  // namespace rpcjob::runtime
