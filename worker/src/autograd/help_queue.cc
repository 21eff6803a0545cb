#include "autograd/help_queue.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include "spin_wait.h"

namespace rpcjob::runtime::autograd {

struct HelpQueue::Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> tasks;
  int helpers = 0;
  // !tasks.empty(), read without the lock by spinning helpers.
  std::atomic<bool> queued{false};

  Task take() {
    if (!queued.load(std::memory_order_acquire)) return {};
    std::lock_guard<std::mutex> lock(mu);
    if (tasks.empty()) return {};
    Task t = std::move(tasks.front());
    tasks.pop_front();
    queued.store(!tasks.empty(), std::memory_order_release);
    return t;
  }
};

HelpQueue::HelpQueue() : shared_(std::make_shared<Shared>()) {}

bool HelpQueue::offer(Task&& task) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->helpers == 0) return false;
    shared_->tasks.push_back(std::move(task));
    shared_->queued.store(true, std::memory_order_release);
  }
  shared_->cv.notify_all();
  return true;
}

HelpQueue::Helper::Helper(HelpQueue& queue, Leftover leftover)
    : shared_(queue.shared_), leftover_(std::move(leftover)) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  ++shared_->helpers;
}

HelpQueue::Helper::~Helper() {
  std::deque<Task> left;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (--shared_->helpers == 0) {
      left.swap(shared_->tasks);
      shared_->queued.store(false, std::memory_order_release);
    }
  }
  for (Task& task : left) leftover_(std::move(task));
}

bool HelpQueue::Helper::helpUntil(const Future& done, std::chrono::nanoseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const std::shared_ptr<Shared> s = shared_;
  // Wakes a sleeping helper; may run long after this call returned (a timeout).
  auto finished = std::make_shared<std::atomic<bool>>(false);
  done.addInlineCallback([s, finished](const Future&) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      finished->store(true, std::memory_order_release);
    }
    s->cv.notify_all();
  });
  const Clock::time_point deadline = timeout == std::chrono::nanoseconds::max() ||
                                             timeout > Clock::time_point::max() - Clock::now()
                                         ? Clock::time_point::max()
                                         : Clock::now() + timeout;
  const auto moved = [&] {
    return finished->load(std::memory_order_acquire) || s->queued.load(std::memory_order_acquire);
  };
  for (;;) {
    if (finished->load(std::memory_order_acquire)) return true;
    if (Task task = s->take()) {
      task();
      continue;
    }
    if (Clock::now() >= deadline) return false;
    if (spinUntil(moved)) continue;
    std::unique_lock<std::mutex> lock(s->mu);
    const auto woken = [&] {
      return finished->load(std::memory_order_relaxed) || !s->tasks.empty();
    };
    if (deadline == Clock::time_point::max()) {
      s->cv.wait(lock, woken);
    } else {
      s->cv.wait_until(lock, deadline, woken);
    }
  }
}

}  // namespace rpcjob::runtime::autograd
