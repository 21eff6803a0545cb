#pragma once
// Functions the test worker serves (and the driver registers too, so any worker
// can call any other).

#include <ATen/core/Tensor.h>

#include "rpcjob/runtime/runtime.h"

namespace rpcjob::testing {

void registerTestFunctions(runtime::Runtime& rt);

// The test worker calls this once its start() has returned, i.e. it has a pipe to
// every peer; its "started" function answers true from then on.
void markStarted();

// The classes "Stage1" (4 -> 8, relu) and "Stage2" (8 -> 2) in one process.
at::Tensor pipelineReference(const at::Tensor& x);

}  // namespace rpcjob::testing
