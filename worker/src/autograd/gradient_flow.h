#pragma once
// What libtorch's engine does to a gradient on its way from one node to the
// next, written out for the pass on the calling thread (local_engine.h): the
// engine's validate_outputs and InputBuffer are not exported by libtorch 1.13
// and have changed since; these follow 1.13's rules, which 2.x keeps in effect.
// Only public libtorch API that is the same in 1.13 and 2.x.

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <torch/csrc/autograd/edge.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rpcjob::runtime::autograd {

using OptionalStream = std::optional<c10::Stream>;

// The device type whose streams order a pass (the engine's 1.13
// `stream(kCUDA)`; 2.x asks the accelerator: CUDA on our machines).
inline constexpr c10::DeviceType kStreamDevice = c10::DeviceType::CUDA;

// Node::stream: the stream of the node's first input on a stream device, the
// stream its forward ran on (1.13 takes a device type, 2.x none).
OptionalStream nodeStream(const torch::autograd::Node& node);

// validate_outputs: `grads[i]` for `edges[i]`'s input; one of a broadcast
// shape is summed back, one of another dtype cast, a scalar on another device
// moved; anything else that does not fit throws c10::Error with
// `format(what is wrong)`.
void validateOutputs(const std::vector<torch::autograd::Edge>& edges,
                     std::vector<at::Tensor>& grads,
                     const std::function<std::string(const std::string&)>& format);

// InputBuffer::add: `var`, produced on `producer`, joins slot `pos` of the
// inputs of a node that runs on `consumer`: summed there (in place when no one
// else holds the slot's tensor), the stream it is summed on, and the
// consumer's when that is the one, first waiting for the producer's (an event,
// never the host). An undefined `var` adds nothing.
void addInput(std::vector<at::Tensor>& buffer, size_t pos, at::Tensor&& var,
              const OptionalStream& producer, const OptionalStream& consumer);

// `waiter` waits, on its device, for what `signaller` has queued so far.
void orderStreams(const c10::Stream& signaller, const c10::Stream& waiter);

}  // namespace rpcjob::runtime::autograd
