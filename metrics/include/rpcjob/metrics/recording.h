#pragma once

// A process-wide pause switch for the hot-path recorders: the TensorPipe
// decorators (rpcjob/instrument) and rpcjob-worker's RPC observer.
//
// Recording is on from the start and nothing in a worker turns it off. It exists
// for the overhead benchmark (`rpcjob-bench --metrics`): comparing two fresh
// process pairs, one with metrics and one without, is dominated by where the
// scheduler puts each process's threads (10-20 % between runs, more than the
// effect); pausing and resuming the recorders in the same two processes compares
// like with like. Paused, a decorator forwards each call as it came (no wrapped
// callback, no clock, no counter) and the observer returns at once; what is left
// is the decorator's extra virtual call, measured apart by instrument_bench.

#include <atomic>

namespace rpcjob {
namespace metrics {

inline std::atomic<bool> gRecording{true};

inline bool recording() noexcept {
  return gRecording.load(std::memory_order_relaxed);
}

inline void setRecording(bool on) noexcept {
  gRecording.store(on, std::memory_order_relaxed);
}

}  // namespace metrics
}  // namespace rpcjob
