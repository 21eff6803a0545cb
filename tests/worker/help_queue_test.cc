// HelpQueue (worker/src/autograd/help_queue.h): work offered while a thread
// helps runs on that thread, also work offered after it registered and before
// it waits; without a helper it is refused and left to the caller; the helper
// returns when its future completes or its timeout passes, and what is still
// queued when it goes is handed to the leftover handler, never lost.
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

const HelpQueue::Leftover kNoLeftovers = [](HelpQueue::Task&&) {
  ADD_FAILURE() << "a task was left over";
};

TEST(HelpQueue, RefusesWorkWhenNoThreadHelpsAndLeavesTheTaskIntact) {
  HelpQueue queue;
  int ran = 0;
  HelpQueue::Task task = [&] { ++ran; };
  EXPECT_FALSE(queue.offer(std::move(task)));
  ASSERT_TRUE(task) << "a refused task must stay with the caller";
  task();
  EXPECT_EQ(ran, 1);
}

// The race a backward pass has: its gradients may come back before the thread
// that sent them waits. Registered first, it still gets them.
TEST(HelpQueue, WorkOfferedBeforeTheHelperWaitsRunsOnItWhenItDoes) {
  HelpQueue queue;
  Promise promise;
  std::thread::id ranOn;
  {
    HelpQueue::Helper helper(queue, kNoLeftovers);
    std::thread([&] {
      HelpQueue::Task task = [&] {
        ranOn = std::this_thread::get_id();
        promise.setValue(c10::IValue());
      };
      EXPECT_TRUE(queue.offer(std::move(task)));
    }).join();
    EXPECT_TRUE(helper.helpUntil(promise.future(), 10s));
  }
  EXPECT_EQ(ranOn, std::this_thread::get_id());
  HelpQueue::Task late = [] {};
  EXPECT_FALSE(queue.offer(std::move(late))) << "the helper is gone";
}

TEST(HelpQueue, TheHelperRunsOfferedWorkUntilItsFutureCompletes) {
  HelpQueue queue;
  Promise promise;
  std::mutex mu;
  std::vector<std::thread::id> ranOn;  // under mu
  const auto ran = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return ranOn.size();
  };
  std::atomic<bool> registered{false};
  std::thread::id waiter;
  std::thread waiting([&] {
    waiter = std::this_thread::get_id();
    HelpQueue::Helper helper(queue, kNoLeftovers);
    registered = true;
    EXPECT_TRUE(helper.helpUntil(promise.future(), 10s));
  });
  while (!registered) std::this_thread::yield();
  for (int i = 0; i < 3; ++i) {
    HelpQueue::Task task = [&] {
      std::lock_guard<std::mutex> lock(mu);
      ranOn.push_back(std::this_thread::get_id());
    };
    EXPECT_TRUE(queue.offer(std::move(task)));
    // Spaced out, so the helper also sleeps between them (past its spin budget).
    std::this_thread::sleep_for(i == 1 ? 20ms : 1ms);
  }
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (ran() < 3 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  promise.setValue(c10::IValue());
  waiting.join();
  ASSERT_EQ(ranOn.size(), 3u);
  for (const auto& id : ranOn) EXPECT_EQ(id, waiter);
}

TEST(HelpQueue, ACompletedFutureEndsTheWaitAtOnceAndATimeoutSaysFalse) {
  HelpQueue queue;
  HelpQueue::Helper helper(queue, kNoLeftovers);
  Promise done;
  done.setValue(c10::IValue());
  EXPECT_TRUE(helper.helpUntil(done.future(), 10s));

  Promise never;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(helper.helpUntil(never.future(), 30ms));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 30ms);
  EXPECT_LT(waited, 5s);
  never.setValue(c10::IValue());  // its wake-up outlives the wait: harmless
}

// The first task holds the helper while its future completes and more are
// queued behind it: the helper returns, and its going hands them on.
TEST(HelpQueue, WorkStillQueuedWhenTheHelperGoesGoesToTheLeftoverHandler) {
  HelpQueue queue;
  Promise promise;
  std::atomic<int> ranByHelper{0};
  std::vector<HelpQueue::Task> leftovers;
  std::atomic<bool> registered{false}, blocked{false}, release{false};
  std::thread waiting([&] {
    HelpQueue::Helper helper(queue,
                             [&](HelpQueue::Task&& task) { leftovers.push_back(std::move(task)); });
    registered = true;
    helper.helpUntil(promise.future(), 10s);
  });
  while (!registered) std::this_thread::yield();
  HelpQueue::Task first = [&] {
    blocked = true;
    while (!release) std::this_thread::yield();
    ++ranByHelper;
  };
  EXPECT_TRUE(queue.offer(std::move(first)));
  while (!blocked) std::this_thread::yield();
  int ranLater = 0;
  for (int i = 0; i < 2; ++i) {
    HelpQueue::Task task = [&] { ++ranLater; };
    EXPECT_TRUE(queue.offer(std::move(task)));
  }
  promise.setValue(c10::IValue());
  release = true;
  waiting.join();
  EXPECT_EQ(ranByHelper, 1);
  ASSERT_EQ(leftovers.size(), 2u);
  for (auto& task : leftovers) task();
  EXPECT_EQ(ranLater, 2);
}

// A task must not throw; one that does leaves through helpUntil, and what was
// queued behind it still goes to the leftover handler.
TEST(HelpQueue, ATaskThatThrowsLeavesNothingQueuedBehind) {
  HelpQueue queue;
  Promise promise;
  std::vector<HelpQueue::Task> leftovers;
  std::atomic<bool> registered{false}, blocked{false}, release{false}, threw{false};
  std::thread waiting([&] {
    try {
      HelpQueue::Helper helper(
          queue, [&](HelpQueue::Task&& task) { leftovers.push_back(std::move(task)); });
      registered = true;
      helper.helpUntil(promise.future(), 10s);
    } catch (const std::runtime_error&) {
      threw = true;
    }
  });
  while (!registered) std::this_thread::yield();
  HelpQueue::Task first = [&] {
    blocked = true;
    while (!release) std::this_thread::yield();
    throw std::runtime_error("broke its promise");
  };
  EXPECT_TRUE(queue.offer(std::move(first)));
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
