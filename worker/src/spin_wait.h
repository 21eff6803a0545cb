#pragma once
// A bounded spin before a thread sleeps for work or for an answer.
//
// Why: a sleeping thread is woken through a futex, and on a virtual machine the
// woken thread's vCPU is often halted: the wake-up then costs an interprocessor
// interrupt through the hypervisor, 20-55 us on the GPU hosts we measure (a
// pool hand-off 44-54 us, the event poller's 24-32 us,
// benchmarks/results/2026-11-24-h200x1-trace.md), more than a whole small call.
// A thread that polls for a short while after its last piece of work sees the
// next one within a microsecond when work comes in bursts (a training step's
// messages, a caller's next call), and still sleeps when it does not.
//
// The spin yields between polls, so on a machine with fewer cores than busy
// threads the thread doing the work is not starved. RPCJOB_SPIN_US sets the
// budget (default 50; 0: never spin), read once per process.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace rpcjob::runtime {

inline std::chrono::microseconds spinBudget() {
  static const std::chrono::microseconds budget = [] {
    const char* text = std::getenv("RPCJOB_SPIN_US");
    if (text == nullptr || *text == '\0') return std::chrono::microseconds(50);
    char* end = nullptr;
    long value = std::strtol(text, &end, 10);
    // A malformed value keeps the default, said once, rather than stopping a
    // worker: it only tunes latency against CPU use.
    if (end == text || *end != '\0' || value < 0 || value > 1000000) {
      std::fprintf(
          stderr,
          "rpcjob: RPCJOB_SPIN_US=%s is not a number of microseconds in [0, 1000000]; using 50\n",
          text);
      return std::chrono::microseconds(50);
    }
    return std::chrono::microseconds(value);
  }();
  return budget;
}

// Polls `ready` (yielding in between) until it returns true or `budget` ran
// out; returns its last answer.
template <class Ready>
bool spinUntil(Ready&& ready, std::chrono::microseconds budget = spinBudget()) {
  if (ready()) return true;
  if (budget.count() == 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  // The clock is read every 16 polls: a poll is a load and a yield.
  for (unsigned i = 1;; ++i) {
    std::this_thread::yield();
    if (ready()) return true;
    if ((i & 15) == 0 && std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace rpcjob::runtime
