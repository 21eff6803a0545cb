#pragma once
// Functions the test worker serves (and the driver registers too, so any worker
// can call any other).

#include "rpcjob/runtime/runtime.h"

namespace rpcjob::testing {

void registerTestFunctions(runtime::Runtime& rt);

// The test worker calls this once its start() has returned, i.e. it has a pipe to
// every peer; its "started" function answers true from then on.
void markStarted();

}  // namespace rpcjob::testing
