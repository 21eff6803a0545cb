#pragma once
// How one gradient travels in a gradients message. An expanded gradient (the
// gradient of sum() is one scalar broadcast to the output's shape) goes as its
// compact form and its sizes, (compact, (sizes...)), and is expanded again on
// arrival: PyTorch's RPC sends such a tensor's small storage too. The recipe's
// 1000x1000 output otherwise costs a 4 MB copy to make it contiguous, 4 MB on the
// wire and a 4 MB receive buffer per backward pass. Anything else goes as it is.
//
// Pure functions; thread safe.

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

namespace rpcjob::runtime::autograd {

c10::IValue packGradient(const at::Tensor& gradient);

// The gradient of a packed item (a tensor, or (compact, sizes)), moved to
// `device` before it is expanded. Throws std::invalid_argument for anything else.
at::Tensor unpackGradient(const c10::IValue& item, const c10::Device& device);

}  // namespace rpcjob::runtime::autograd
