#pragma once
// The futex calls the runtime sleeps and wakes with: a SpinMutex's lock word
// (spin_mutex.h: memory of this process only) and a lane's bell (lane/ring.h:
// a mapping another process shares, so without FUTEX_PRIVATE_FLAG).

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace rpcjob::runtime {

// kProcess: only this process waits on the word (the kernel then skips the
// shared-mapping lookup); kShared: the word lies in memory another process maps.
enum class FutexScope { kProcess, kShared };

// Sleeps while *word == expected, at most `timeout` (negative: no limit);
// spurious returns happen.
inline void futexWait(std::atomic<uint32_t>* word, uint32_t expected, FutexScope scope,
                      std::chrono::microseconds timeout = std::chrono::microseconds(-1)) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
            scope == FutexScope::kProcess ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT, expected,
            timeout.count() < 0 ? nullptr : &ts, nullptr, 0);
}

// Wakes one thread sleeping on `word`.
inline void futexWake(std::atomic<uint32_t>* word, FutexScope scope) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
            scope == FutexScope::kProcess ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE, 1, nullptr, nullptr,
            0);
}

}  // namespace rpcjob::runtime
