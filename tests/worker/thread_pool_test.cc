// The runtime's thread pool: every task runs exactly once, and a task submitted
// while the threads spin, stop spinning or sleep is never left waiting
// (thread_pool.h: only a spinning thread or a wake-up starts it).
#include "thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "spin_wait.h"

namespace rpcjob::runtime {
namespace {

using namespace std::chrono_literals;

// Submits one task and waits (at most `limit`) for it to run.
bool runsWithin(ThreadPool& pool, std::chrono::milliseconds limit) {
  std::mutex mu;
  std::condition_variable cv;
  bool ran = false;
  EXPECT_TRUE(pool.submit([&] {
    std::lock_guard<std::mutex> lock(mu);
    ran = true;
    cv.notify_one();
  }));
  std::unique_lock<std::mutex> lock(mu);
  return cv.wait_for(lock, limit, [&] { return ran; });
}

TEST(ThreadPool, EveryTaskOfConcurrentSubmittersRunsOnce) {
  constexpr int kSubmitters = 4, kEach = 20000;
  std::vector<std::atomic<int>> runs(kSubmitters * kEach);
  {
    ThreadPool pool(4);
    std::vector<std::thread> submitters;
    for (int s = 0; s < kSubmitters; ++s) {
      submitters.emplace_back([&, s] {
        for (int i = 0; i < kEach; ++i) {
          ASSERT_TRUE(pool.submit([&runs, k = s * kEach + i] { runs[k].fetch_add(1); }));
        }
      });
    }
    for (auto& t : submitters) t.join();
  }  // stop() runs what is queued
  int wrong = 0;
  for (auto& r : runs) wrong += r.load() != 1;
  EXPECT_EQ(wrong, 0);
}

// Gaps around the spin budget: the task comes while a thread spins, as it gives
// up, or once every thread sleeps. A lost wake-up leaves one task waiting.
TEST(ThreadPool, TasksAfterIdleGapsAroundTheSpinBudgetRun) {
  ThreadPool pool(3);
  std::mt19937 random(7);
  const auto budget = spinBudget();
  std::uniform_int_distribution<int64_t> gapUs(0, 3 * budget.count() + 10);
  for (int i = 0; i < 1500; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(gapUs(random)));
    ASSERT_TRUE(runsWithin(pool, 2000ms)) << "task " << i << " was not started";
  }
}

// Four tasks that wait for each other's start need four threads awake, whether
// the burst finds every thread asleep or one spinning (which takes one task and
// must not leave the others queued behind it).
void expectABurstRunsOnEveryThread(ThreadPool& pool) {
  std::atomic<int> running{0}, peak{0};
  std::atomic<bool> release{false};
  for (int i = 0; i < 4; ++i) {
    pool.submit([&] {
      int now = running.fetch_add(1) + 1;
      int seen = peak.load();
      while (now > seen && !peak.compare_exchange_weak(seen, now)) {
      }
      while (!release.load()) std::this_thread::sleep_for(100us);
    });
  }
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while (peak.load() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  release = true;
  EXPECT_EQ(peak.load(), 4);
}

TEST(ThreadPool, AllThreadsAsleepAreWokenForABurst) {
  ThreadPool pool(4);
  std::this_thread::sleep_for(spinBudget() * 4 + 5ms);  // every thread sleeps now
  expectABurstRunsOnEveryThread(pool);
}

TEST(ThreadPool, ABurstWhileAThreadSpinsRunsOnEveryThread) {
  for (int round = 0; round < 20; ++round) {
    ThreadPool pool(4);
    std::this_thread::sleep_for(spinBudget() * 4 + 5ms);
    ASSERT_TRUE(runsWithin(pool, 2000ms));  // its thread spins now
    expectABurstRunsOnEveryThread(pool);
  }
}

TEST(ThreadPool, StopWhileSpinningReturnsAndRefusesLaterTasks) {
  ThreadPool pool(2);
  ASSERT_TRUE(runsWithin(pool, 2000ms));  // a thread spins right after this
  auto t0 = std::chrono::steady_clock::now();
  pool.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_FALSE(pool.submit([] {}));
}

TEST(SpinWait, ReturnsAtOnceWhenReadyAndGivesUpAfterTheBudget) {
  int polls = 0;
  EXPECT_TRUE(spinUntil([&] { return ++polls > 0; }, 1000ms));
  EXPECT_EQ(polls, 1);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(spinUntil([] { return false; }, 2ms));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 2ms);
  EXPECT_LT(took, 500ms);
  EXPECT_FALSE(spinUntil([] { return false; }, 0us));
}

}  // namespace
}  // namespace rpcjob::runtime
