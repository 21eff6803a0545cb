#include "spin_mutex.h"

#include <thread>

#include "futex.h"

namespace rpcjob::runtime {
namespace {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

}  // namespace

void SpinMutex::lockContended() {
  const auto deadline = std::chrono::steady_clock::now() + kSpinFor;
  // Reads only while the lock is held: a failed compare-exchange would take
  // the cache line from the holder, which must write it to unlock.
  for (unsigned i = 1;; ++i) {
    uint32_t seen = state_.load(std::memory_order_relaxed);
    if (seen == 0 && state_.compare_exchange_weak(seen, 1, std::memory_order_acquire,
                                                  std::memory_order_relaxed)) {
      return;
    }
    cpuRelax();
    if ((i & 15) == 0 && std::chrono::steady_clock::now() >= deadline) break;
  }
  // Sleep. Taking the lock as 2 (not 1) from here on: this thread cannot tell
  // whether others sleep too, so its own unlock must wake one.
  uint32_t was = state_.exchange(2, std::memory_order_acquire);
  while (was != 0) {
    futexWait(&state_, 2, FutexScope::kProcess);
    was = state_.exchange(2, std::memory_order_acquire);
  }
}

void SpinMutex::wakeOne() {
  futexWake(&state_, FutexScope::kProcess);
}

}  // namespace rpcjob::runtime
