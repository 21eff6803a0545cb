#pragma once
// A fixed pool of threads running queued tasks in FIFO order: where functions
// that may block and `then` continuations run, off TensorPipe's threads.
// Thread safety: submit() from any thread; stop() once (the destructor calls it).
//
// A thread that finds the queue empty spins briefly before it sleeps
// (spin_wait.h, AdaptiveSpin: long while tasks keep coming), one thread at a
// time: a task submitted meanwhile starts without a futex wake-up, and submit()
// signals only when a thread sleeps.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "spin_wait.h"

namespace rpcjob::runtime {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  // Returns false (and drops the task) once stopped.
  bool submit(std::function<void()> task);
  // Runs what is queued, then joins. Safe to call from a pool thread (it then
  // detaches instead of joining itself).
  void stop();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  int sleepers_ = 0;                   // under mu_: threads waiting on cv_
  std::atomic<size_t> queued_{0};      // tasks_.size(), read by the spinner unlocked
  std::atomic<bool> spinning_{false};  // one thread spins at a time
  std::atomic<bool> stopFlag_{false};
  AdaptiveSpin spin_;
  std::vector<std::thread> threads_;
};

}  // namespace rpcjob::runtime
