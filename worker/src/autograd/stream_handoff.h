#pragma once
// CUDA stream order across a thread hand-off. Before an async function runs, the
// runtime makes the reading thread's current streams wait for the transfer of
// the call's tensors; work the function hands to another thread (the gradients
// built-in runs the engine on the pool) must wait for those streams in turn.
// Events recorded here, waited on there by the other thread's current streams:
// the host never waits. Nothing on a CPU build.

#include <ATen/core/ivalue.h>

#if RPCJOB_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "autograd/tensor_walk.h"
#endif

namespace rpcjob::runtime::autograd {

class StreamHandoff {
 public:
  // On the thread that received `value`: marks its current streams' position
  // on each device `value` has tensors on.
  explicit StreamHandoff([[maybe_unused]] const c10::IValue& value) {
#if RPCJOB_WITH_CUDA
    std::set<c10::DeviceIndex> devices;
    forEachTensor(value, [&](const at::Tensor& t) {
      if (t.is_cuda()) devices.insert(t.device().index());
    });
    for (c10::DeviceIndex d : devices) {
      auto event = std::make_shared<at::cuda::CUDAEvent>();
      event->record(c10::cuda::getCurrentCUDAStream(d));
      events_.emplace_back(d, std::move(event));
    }
#endif
  }
  // On the thread the work moved to: its current streams wait for those marks.
  void waitOnCurrentStreams() const {
#if RPCJOB_WITH_CUDA
    for (const auto& [d, event] : events_) event->block(c10::cuda::getCurrentCUDAStream(d));
#endif
  }

 private:
#if RPCJOB_WITH_CUDA
  std::vector<std::pair<c10::DeviceIndex, std::shared_ptr<at::cuda::CUDAEvent>>> events_;
#endif
};

}  // namespace rpcjob::runtime::autograd
