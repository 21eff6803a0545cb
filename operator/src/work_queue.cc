#include "rpcjob/operator/work_queue.h"

#include <algorithm>

namespace rpcjob::kube {

void WorkQueue::addLocked(const std::string& key) {
  if (shutDown_ || dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // done() queues it
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  addLocked(key);
}

void WorkQueue::addAfter(const std::string& key, std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutDown_) return;
  if (delay.count() <= 0) {
    addLocked(key);
    return;
  }
  waiting_.emplace(Clock::now() + delay, key);
  // A getter may be sleeping until a later deadline, or with none.
  cv_.notify_all();
}

std::chrono::milliseconds WorkQueue::delayFor(int failures) const {
  const int64_t base = std::max<int64_t>(options_.baseDelay.count(), 1);
  const int64_t max = options_.maxDelay.count();
  if (failures >= 62) return options_.maxDelay;
  int64_t d = base;
  for (int i = 0; i < failures && d < max; ++i) d *= 2;
  return std::chrono::milliseconds(std::min(d, max));
}

void WorkQueue::addRateLimited(const std::string& key) {
  std::chrono::milliseconds delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int& n = failures_[key];
    delay = delayFor(n);
    ++n;
  }
  addAfter(key, delay);
}

void WorkQueue::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(key);
}

int WorkQueue::failures(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

std::chrono::milliseconds WorkQueue::nextDelay(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(key);
  return delayFor(it == failures_.end() ? 0 : it->second);
}

void WorkQueue::promoteReadyLocked(Clock::time_point now) {
  while (!waiting_.empty() && waiting_.begin()->first <= now) {
    std::string key = waiting_.begin()->second;
    waiting_.erase(waiting_.begin());
    addLocked(key);
  }
}

std::optional<std::string> WorkQueue::take(std::unique_lock<std::mutex>& lock,
                                           std::optional<Clock::time_point> deadline) {
  for (;;) {
    if (shutDown_) return std::nullopt;
    auto now = Clock::now();
    promoteReadyLocked(now);
    if (!queue_.empty()) {
      std::string key = std::move(queue_.front());
      queue_.pop_front();
      dirty_.erase(key);
      processing_.insert(key);
      return key;
    }
    if (deadline && now >= *deadline) return std::nullopt;
    std::optional<Clock::time_point> wake = deadline;
    if (!waiting_.empty() && (!wake || waiting_.begin()->first < *wake)) {
      wake = waiting_.begin()->first;
    }
    if (wake) {
      cv_.wait_until(lock, *wake);
    } else {
      cv_.wait(lock);
    }
  }
}

std::optional<std::string> WorkQueue::get() {
  std::unique_lock<std::mutex> lock(mu_);
  return take(lock, std::nullopt);
}

std::optional<std::string> WorkQueue::getFor(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return take(lock, Clock::now() + timeout);
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key) && !shutDown_) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::shutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutDown_ = true;
  cv_.notify_all();
}

bool WorkQueue::shuttingDown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutDown_;
}

size_t WorkQueue::depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

size_t WorkQueue::processing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return processing_.size();
}

size_t WorkQueue::delayed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.size();
}

}  // namespace rpcjob::kube
