#pragma once
// The tensors of a call's value in one fixed order, the same on both sides of
// a message: the sender flags which of them require grad (wire::Header's
// requiresGrad) and the receiver finds them again after decoding. Depth first;
// tuples and lists in order, dicts' values in insertion order (which the
// encoders keep); other values hold no tensors that autograd follows.

#include <ATen/core/ivalue.h>

#include <functional>

namespace rpcjob::runtime::autograd {

void forEachTensor(const c10::IValue& value, const std::function<void(const at::Tensor&)>& fn);

// A copy of `value` whose tensors are fn(tensor), containers rebuilt (the
// decoded value's own are left alone).
c10::IValue mapTensors(const c10::IValue& value,
                       const std::function<at::Tensor(const at::Tensor&)>& fn);

}  // namespace rpcjob::runtime::autograd
