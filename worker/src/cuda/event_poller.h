#pragma once
// Runs a callback on the host once a CUDA event has completed, without putting a
// wait on any GPU stream.
//
// Why: two processes that share one GPU each have their own CUDA context, and the
// GPU time-slices between contexts. A stream in one context that waits on an
// interprocess event of the other (cudaStreamWaitEvent) keeps its context busy
// doing nothing until its time slice runs out, while the work that would complete
// the event waits for the next slice: each such wait cost ~1.3 ms on an H200
// (a small same-GPU round trip took 2.66 ms). Waiting on the host instead leaves
// the GPU to whichever context has work.
//
// One thread per poller, started on first use; it spins (yielding) while events
// are outstanding and sleeps otherwise. Callbacks run on that thread, in
// completion order, and must not block. Thread safety: whenComplete may be called
// from any thread, including from a callback.
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

namespace rpcjob::runtime::cuda {

class EventPoller {
 public:
  // error is "" on success, else what cudaEventQuery reported.
  using Callback = std::function<void(const std::string& error)>;

  EventPoller();
  ~EventPoller();  // joins the thread; callbacks still pending get "poller stopped"
  EventPoller(const EventPoller&) = delete;
  EventPoller& operator=(const EventPoller&) = delete;

  // `event` belongs to `device` (made current while querying).
  void whenComplete(cudaEvent_t event, int device, Callback callback);

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the thread (which may outlive us, detached)
};

}  // namespace rpcjob::runtime::cuda
