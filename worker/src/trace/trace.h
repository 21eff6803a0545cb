#pragma once
// Timestamps of a call's steps across threads and processes, to see where its
// time goes (which hand-off, which wake-up, which wait). RPCJOB_TRACE=DIR turns
// it on at start-up: each process writes DIR/trace-PID.txt when it exits, and
// benchmarks/profile/trace_timeline.py merges the files into one timeline (the
// clock is CLOCK_MONOTONIC, shared by the processes of one host). Off, a point
// costs one relaxed load and a branch.

#include <atomic>
#include <cstdint>
#include <string>

namespace rpcjob::runtime::trace {

extern std::atomic<bool> gEnabled;

// `what` must be a string literal (only its address is stored).
void record(const char* what, uint64_t id);

inline void point(const char* what, uint64_t id = 0) {
  if (gEnabled.load(std::memory_order_relaxed)) record(what, id);
}

// Starts recording for this process into `dir` (what RPCJOB_TRACE does).
void enable(const std::string& dir);
// Writes the events recorded so far to DIR/trace-PID.txt, one line each:
// "NANOSECONDS PID TID WHAT ID", per thread in order; false when tracing is off
// or the file cannot be written. Runs at exit by itself, and at the end of
// Runtime::shutdown (for processes that end with _exit).
bool flush();

}  // namespace rpcjob::runtime::trace
