#pragma once
// A bounded spin before a thread sleeps for work or for an answer.
//
// Why: a sleeping thread is woken through a futex, and on a virtual machine the
// woken thread's vCPU is often halted: the wake-up then costs an interprocessor
// interrupt through the hypervisor, 20-55 us on the GPU hosts we measure (a
// pool hand-off 44-54 us, the event poller's 24-32 us,
// benchmarks/results/2026-11-24-h200x1-trace.md), more than a whole small call.
// A thread that polls for a while after its last piece of work sees the next
// one within a microsecond when work keeps coming (a training step's messages
// every few hundred microseconds, a caller's next call), and still sleeps when
// it does not.
//
// The spin yields between polls, so where threads outnumber cores the thread
// doing the work is not starved. The budget (spinBudget()) is
// RPCJOB_SPIN_US, else defaultSpinBudget(availableCpus()); read once.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace rpcjob::runtime {

// The short spin: long enough for a small call's answer, short enough not to
// take CPU from whoever is busy meanwhile (a small pod's work, a large
// transfer's copy threads). The default budget on few CPUs, a waiting caller's
// at most (future.cc), and an AdaptiveSpin's after a long idle gap.
inline constexpr std::chrono::microseconds kShortSpin{50};

// 1 ms with at least 8 CPUs to spare (a training step's hand-offs come every
// few hundred microseconds: the recipe's 10 iterations on one H200 took
// 0.012-0.0145 s with 1 ms against 0.0147-0.0191 s with 50 us), else 50 us
// (a small pod: a spin there is CPU the work needs, or throttled time under a
// quota). Pure.
std::chrono::microseconds defaultSpinBudget(double availableCpus);

// Microseconds in [0, max] from environment variable `name`; `fallback` when it
// is unset, and when it is malformed too, said on stderr (a spin only tunes
// latency against CPU: not worth stopping a worker for).
std::chrono::microseconds microsecondsFromEnvironment(const char* name,
                                                      std::chrono::microseconds fallback,
                                                      long long max);

// RPCJOB_SPIN_US (0: never spin) or the default; a malformed value is said on
// stderr once and the default used (it tunes latency against CPU, nothing more).
std::chrono::microseconds spinBudget();

// The budget for a thread whose work comes at a rate of its own: the full
// budget while the last idle gap was shorter than four of it (work keeps
// coming: a training step's hand-offs, which one spin misses now and then),
// kShortSpin at most after a longer one (work is rare: a long spin would only
// take CPU from whoever is busy meanwhile, as it took it from the 400 MB round
// trip's copy threads on the GPU host). Thread-safe.
class AdaptiveSpin {
 public:
  std::chrono::microseconds budget() const {
    return budgetAfterGap(std::chrono::nanoseconds(lastGapNs_.load(std::memory_order_relaxed)));
  }
  // The same rule for an idle gap of `gap` (one still going on, too).
  static std::chrono::microseconds budgetAfterGap(std::chrono::nanoseconds gap) {
    const auto full = spinBudget();
    return gap < 4 * full ? full : std::min(full, kShortSpin);
  }
  // A thread that went idle at `since` has work again now.
  void idleEnded(std::chrono::steady_clock::time_point since) {
    lastGapNs_.store((std::chrono::steady_clock::now() - since).count(), std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> lastGapNs_{0};
};

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
