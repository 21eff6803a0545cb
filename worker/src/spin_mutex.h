#pragma once
// A mutex for short critical sections that two busy threads take at a high
// rate: a caller inserting each call into the pending table and its poller
// taking each answer out (runtime_impl.h's pendingMu_).
//
// Why not std::mutex: glibc's mutex sleeps at the first failed attempt, and the
// unlock that follows makes a futex syscall to wake the sleeper. On the GPU
// host (a virtual machine) an async burst at ~775k calls/s made ~266k futex
// calls a second on the caller's thread and ~225k on its poller's
// (benchmarks/profile/async-threads.sh), for critical sections of tens of
// nanoseconds: each of them a syscall, often with a wake-up through the
// hypervisor, on the path of every call behind it. With this mutex: ~4k and
// ~2k, and rpcjob-bench's async rate 714k calls/s against 500k (medians of 5
// alternating runs, one H100 host; 2026-11-25-h100x1-session14.md).
//
// Here a thread that finds the lock held first spins, watching the lock word
// without writing it, for up to kSpinFor; only then it sleeps on a futex, and
// only an unlock that finds sleepers makes a syscall. The classic three-state
// futex mutex (0 free, 1 held, 2 held with sleepers possible). Meets Lockable:
// std::lock_guard and std::unique_lock take it; wait on it with
// std::condition_variable_any.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rpcjob::runtime {

class SpinMutex {
 public:
  // Long enough to outlast a critical section that misses the cache a few
  // times, short against a futex round trip on a virtual machine (20-55 us,
  // spin_wait.h).
  static constexpr std::chrono::nanoseconds kSpinFor{2000};

  SpinMutex() = default;
  SpinMutex(const SpinMutex&) = delete;
  SpinMutex& operator=(const SpinMutex&) = delete;

  void lock() {
    uint32_t expected = 0;
    if (state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
      return;
    }
    lockContended();
  }

  bool try_lock() {
    uint32_t expected = 0;
    return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() {
    if (state_.fetch_sub(1, std::memory_order_release) != 1) {
      // Was 2: someone may sleep.
      state_.store(0, std::memory_order_release);
      wakeOne();
    }
  }

 private:
  void lockContended();
  void wakeOne();

  std::atomic<uint32_t> state_{0};
};

}  // namespace rpcjob::runtime
