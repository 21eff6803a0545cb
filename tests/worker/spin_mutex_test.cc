// SpinMutex (worker/src/spin_mutex.h): mutual exclusion under contention, sleepers
// woken, and std::condition_variable_any over it (the runtime's pendingCv_).
#include "spin_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace rpcjob::runtime {
namespace {

using namespace std::chrono_literals;

TEST(SpinMutex, CountsExactlyUnderContention) {
  SpinMutex mu;
  // Non-atomic on purpose: a lost update (or TSan's report) means the lock let
  // two threads in.
  uint64_t counter = 0;
  constexpr int kThreads = 4, kEach = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        std::lock_guard<SpinMutex> lock(mu);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, uint64_t{kThreads} * kEach);
}

TEST(SpinMutex, HolderLongerThanTheSpinWakesTheSleeper) {
  SpinMutex mu;
  std::atomic<bool> got{false};
  mu.lock();
  std::thread waiter([&] {
    std::lock_guard<SpinMutex> lock(mu);  // spins kSpinFor, then sleeps
    got = true;
  });
  std::this_thread::sleep_for(50ms);  // far past the spin: the waiter sleeps now
  EXPECT_FALSE(got.load());
  mu.unlock();
  waiter.join();  // hangs (test timeout) if the unlock did not wake it
  EXPECT_TRUE(got.load());
  // Free again, and the fast path takes it.
  EXPECT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
}

TEST(SpinMutex, ManySleepersAllGetIn) {
  SpinMutex mu;
  std::atomic<int> in{0};
  mu.lock();
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      std::lock_guard<SpinMutex> lock(mu);
      in.fetch_add(1);
      std::this_thread::sleep_for(1ms);  // each holder outlasts the others' spins
    });
  }
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(in.load(), 0);
  mu.unlock();
  for (auto& t : threads) t.join();
  EXPECT_EQ(in.load(), 6);
}

TEST(SpinMutex, ConditionVariableAnyWaitsAndWakes) {
  SpinMutex mu;
  std::condition_variable_any cv;
  bool ready = false;
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    {
      std::lock_guard<SpinMutex> lock(mu);
      ready = true;
    }
    cv.notify_all();
  });
  {
    std::unique_lock<SpinMutex> lock(mu);
    EXPECT_TRUE(cv.wait_until(lock, std::chrono::steady_clock::now() + 10s, [&] { return ready; }));
  }
  setter.join();
  // And a wait that nobody ends returns at its deadline, holding the lock.
  std::unique_lock<SpinMutex> lock(mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(cv.wait_until(lock, start + 20ms), std::cv_status::timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
  EXPECT_FALSE(mu.try_lock());
}

}  // namespace
}  // namespace rpcjob::runtime
