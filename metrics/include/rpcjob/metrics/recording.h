#pragma once

// A process-wide pause switch for the hot-path recorders: the RPC observer
// (rpcjob-worker's), the TensorPipe channel decorators and the transport
// decorators (rpcjob/instrument), each paused on its own.
//
// Recording is on from the start and nothing in a worker turns it off. It exists
// for the overhead benchmark (`rpcjob-bench --metrics`): comparing two fresh
// process pairs, one with metrics and one without, is dominated by where the
// scheduler puts each process's threads (10-20 % between runs, more than the
// effect); pausing and resuming the recorders in the same two processes compares
// like with like, and pausing one recorder at a time (`--recorders`) tells which
// one costs what. Paused, a decorator forwards each call as it came (no wrapped
// callback, no clock, no counter) and the observer returns at once; what is left
// is the decorator's extra virtual call, measured apart by instrument_bench.

#include <atomic>
#include <string>

namespace rpcjob {
namespace metrics {

enum class Recorder : unsigned {
  kObserver = 1u << 0,    // RPC calls, latency, in-flight
  kChannels = 1u << 1,    // the channel decorators: transfers
  kTransports = 1u << 2,  // the transport decorators: bytes and errors
};
inline constexpr unsigned kAllRecorders = 0b111;

// The recorders that record now (a mask of Recorder bits).
inline std::atomic<unsigned> gRecording{kAllRecorders};

inline bool recording(Recorder recorder) noexcept {
  return (gRecording.load(std::memory_order_relaxed) & static_cast<unsigned>(recorder)) != 0;
}

// Records with the recorders in `mask` only.
inline void setRecording(unsigned mask) noexcept {
  gRecording.store(mask & kAllRecorders, std::memory_order_relaxed);
}

// All or none.
inline void setRecording(bool on) noexcept {
  setRecording(on ? kAllRecorders : 0u);
}

// A comma-separated list of "observer", "channels", "transports" (or "all") to
// a mask; false for an unknown or missing name. "none" alone is the empty mask:
// the overhead bench's control, whose two states are the same and whose
// figures show the bench's own noise and bias.
inline bool parseRecorders(const std::string& list, unsigned& mask) {
  if (list == "none") {
    mask = 0;
    return true;
  }
  unsigned parsed = 0;
  for (std::size_t at = 0; at <= list.size();) {
    std::size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(at, end - at);
    if (name == "observer") {
      parsed |= static_cast<unsigned>(Recorder::kObserver);
    } else if (name == "channels") {
      parsed |= static_cast<unsigned>(Recorder::kChannels);
    } else if (name == "transports") {
      parsed |= static_cast<unsigned>(Recorder::kTransports);
    } else if (name == "all") {
      parsed |= kAllRecorders;
    } else {
      return false;
    }
    at = end + 1;
  }
  mask = parsed;
  return true;
}

}  // namespace metrics
}  // namespace rpcjob
