#pragma once
// Functions the test worker serves (and the driver registers too, so any worker
// can call any other).

#include "rpcjob/runtime/runtime.h"

namespace rpcjob::testing {

void registerTestFunctions(runtime::Runtime& rt);

}  // namespace rpcjob::testing
