#include "thread_pool.h"

#include "trace/trace.h"

namespace rpcjob::runtime {

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < (threads < 1 ? 1 : threads); ++i) threads_.emplace_back([this] { run(); });
}

ThreadPool::~ThreadPool() {
  stop();
}

bool ThreadPool::submit(std::function<void()> task) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
    queued_.store(tasks_.size(), std::memory_order_release);
    // A spinning thread takes it; otherwise a sleeping one must be woken. A
    // spinner that gives up clears spinning_ before it looks at tasks_ under
    // mu_, so either it sees this task there or this sees it no longer spin.
    wake = sleepers_ > 0 && !spinning_.load(std::memory_order_acquire);
  }
  trace::point("pool.submit");
  if (wake) cv_.notify_one();
  return true;
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    stopFlag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (!t.joinable()) continue;
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();
    } else {
      t.join();
    }
  }
}

void ThreadPool::run() {
  for (;;) {
    // Only the spinning thread times the gaps between tasks: a thread that
    // slept through a busy spell has seen none of them.
    const bool spun = queued_.load(std::memory_order_acquire) == 0 &&
                      !spinning_.exchange(true, std::memory_order_acq_rel);
    std::chrono::steady_clock::time_point idleSince;
    if (spun) {
      idleSince = std::chrono::steady_clock::now();
      spinUntil(
          [&] {
            return queued_.load(std::memory_order_acquire) > 0 ||
                   stopFlag_.load(std::memory_order_acquire);
          },
          spin_.budget());
      spinning_.store(false, std::memory_order_release);
    }
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!stopping_ && tasks_.empty()) {
        ++sleepers_;
        cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        --sleepers_;
      }
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
      queued_.store(tasks_.size(), std::memory_order_release);
      // Tasks submitted while this thread spun woke no one: pass them on, or
      // they would wait for this one's task to finish.
      if (!tasks_.empty() && sleepers_ > 0 && !spinning_.load(std::memory_order_acquire)) {
        cv_.notify_one();
      }
    }
    if (spun) spin_.idleEnded(idleSince);
    trace::point("pool.run");
    task();
  }
}

}  // namespace rpcjob::runtime
