#pragma once
// Small models for the distributed autograd tests, the same on every worker:
// linear layers made from a seed (so a test rebuilds them locally as the
// reference) and held by name in this process.

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

#include "rpcjob/runtime/runtime.h"

namespace rpcjob::testing {

// Deterministic weight [out, in] and bias [out], leaves that require grad.
std::pair<at::Tensor, at::Tensor> linearParams(int64_t in, int64_t out, int64_t seed);
// tanh(x W^T + b).
at::Tensor linearForward(const at::Tensor& w, const at::Tensor& b, const at::Tensor& x);

// The weight and bias of a linear made here by "ag.make_linear".
std::pair<at::Tensor, at::Tensor> localLinear(const std::string& name);

void registerAutogradTestFunctions(runtime::Runtime& rt);

}  // namespace rpcjob::testing
