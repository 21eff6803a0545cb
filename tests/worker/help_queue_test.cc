// HelpQueue (worker/src/autograd/help_queue.h): work offered while a thread
// waits runs on that thread; without one it is refused and left to the caller;
// the waiter returns when its future completes or its timeout passes, and what
// is still queued then goes to the leftover handler, never lost.
#include "autograd/help_queue.h"

#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "rpcjob/runtime/future.h"

namespace rpcjob::testing {
namespace {

using runtime::Promise;
using runtime::autograd::HelpQueue;
using namespace std::chrono_literals;

const auto kNoLeftovers = [](HelpQueue::Task&&) { ADD_FAILURE() << "a task was left over"; };

TEST(HelpQueue, RefusesWorkWhenNoThreadWaitsAndLeavesTheTaskIntact) {
  HelpQueue queue;
  int ran = 0;
  HelpQueue::Task task = [&] { ++ran; };
  EXPECT_FALSE(queue.offer(std::move(task)));
  ASSERT_TRUE(task) << "a refused task must stay with the caller";
  task();
  EXPECT_EQ(ran, 1);
}

TEST(HelpQueue, TheWaitingThreadRunsOfferedWorkUntilItsFutureCompletes) {
  HelpQueue queue;
  Promise promise;
  std::mutex mu;
  std::vector<std::thread::id> ranOn;  // under mu
  const auto ran = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return ranOn.size();
  };
  std::atomic<bool> helping{false};
  std::thread::id waiter;
  std::thread waiting([&] {
    waiter = std::this_thread::get_id();
    helping = true;
    EXPECT_TRUE(queue.helpUntil(promise.future(), 10s, kNoLeftovers));
  });
  while (!helping) std::this_thread::yield();
  // The waiter registers inside helpUntil: offer until it is there.
  for (int i = 0; i < 3; ++i) {
    HelpQueue::Task task = [&] {
      std::lock_guard<std::mutex> lock(mu);
      ranOn.push_back(std::this_thread::get_id());
    };
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!queue.offer(std::move(task)) && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    // Spaced out, so the waiter also sleeps between them (past its spin budget).
    std::this_thread::sleep_for(i == 1 ? 20ms : 1ms);
  }
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (ran() < 3 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  promise.setValue(c10::IValue());
  waiting.join();
  ASSERT_EQ(ranOn.size(), 3u);
  for (const auto& id : ranOn) EXPECT_EQ(id, waiter);
  // Nobody waits any more: refused again.
  HelpQueue::Task late = [] {};
  EXPECT_FALSE(queue.offer(std::move(late)));
}

TEST(HelpQueue, ACompletedFutureEndsTheWaitAtOnceAndATimeoutSaysFalse) {
  HelpQueue queue;
  Promise done;
  done.setValue(c10::IValue());
  EXPECT_TRUE(queue.helpUntil(done.future(), 10s, kNoLeftovers));

  Promise never;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(queue.helpUntil(never.future(), 30ms, kNoLeftovers));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 30ms);
  EXPECT_LT(waited, 5s);
  never.setValue(c10::IValue());  // its wake-up outlives the wait: harmless
}

TEST(HelpQueue, WorkStillQueuedWhenTheWaiterLeavesGoesToTheLeftoverHandler) {
  HelpQueue queue;
  Promise promise;
  std::atomic<int> ranByWaiter{0};
  std::vector<HelpQueue::Task> leftovers;
  std::atomic<bool> blocked{false};
  std::atomic<bool> release{false};
  std::thread waiting([&] {
    queue.helpUntil(promise.future(), 10s,
                    [&](HelpQueue::Task&& task) { leftovers.push_back(std::move(task)); });
  });
  // The first task holds the waiter while the future completes and two more
  // are queued behind it: the waiter sees its future done and leaves them.
  HelpQueue::Task first = [&] {
    blocked = true;
    while (!release) std::this_thread::yield();
    ++ranByWaiter;
  };
  while (!queue.offer(std::move(first))) std::this_thread::yield();
  while (!blocked) std::this_thread::yield();
  int ranLater = 0;
  for (int i = 0; i < 2; ++i) {
    HelpQueue::Task task = [&] { ++ranLater; };
    EXPECT_TRUE(queue.offer(std::move(task)));
  }
  promise.setValue(c10::IValue());
  release = true;
  waiting.join();
  EXPECT_EQ(ranByWaiter, 1);
  ASSERT_EQ(leftovers.size(), 2u);
  for (auto& task : leftovers) task();
  EXPECT_EQ(ranLater, 2);
}

// A task must not throw; one that does still leaves the queue usable and hands
// what was queued behind it to the leftover handler.
TEST(HelpQueue, ATaskThatThrowsLeavesNothingQueuedBehind) {
  HelpQueue queue;
  Promise promise;
  std::vector<HelpQueue::Task> leftovers;
  std::atomic<bool> blocked{false};
  std::atomic<bool> release{false};
  std::atomic<bool> threw{false};
  std::thread waiting([&] {
    try {
      queue.helpUntil(promise.future(), 10s,
                      [&](HelpQueue::Task&& task) { leftovers.push_back(std::move(task)); });
    } catch (const std::runtime_error&) {
      threw = true;
    }
  });
  HelpQueue::Task first = [&] {
    blocked = true;
    while (!release) std::this_thread::yield();
    throw std::runtime_error("broke its promise");
  };
  while (!queue.offer(std::move(first))) std::this_thread::yield();
  while (!blocked) std::this_thread::yield();
  int ranLater = 0;
  HelpQueue::Task behind = [&] { ++ranLater; };
  EXPECT_TRUE(queue.offer(std::move(behind)));
  release = true;
  waiting.join();
  EXPECT_TRUE(threw);
  ASSERT_EQ(leftovers.size(), 1u);
  leftovers.front()();
  EXPECT_EQ(ranLater, 1);
  HelpQueue::Task late = [] {};
  EXPECT_FALSE(queue.offer(std::move(late))) << "the helper that threw is gone";
  promise.setValue(c10::IValue());
}

}  // namespace
}  // namespace rpcjob::testing
