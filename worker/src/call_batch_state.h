#pragma once
// The thread's open CallBatch (rpcjob/runtime/call_batch.h), for the runtime's
// request path and for Future's waits.

namespace rpcjob::runtime {
class RuntimeImpl;
}

namespace rpcjob::runtime::detail {

// The runtime whose requests this thread holds, or null.
RuntimeImpl* batchingRuntime();
// Writes what this thread holds (nothing when it has no batch): before any wait.
void flushCallBatch();

}  // namespace rpcjob::runtime::detail
