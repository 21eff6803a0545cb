#include "rpcjob/operator/cancellation.h"

#include <vector>

namespace rpcjob::kube {

void Cancellation::cancel() {
  std::map<int, std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& [id, fn] : callbacks) fn();
}

bool Cancellation::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

int Cancellation::onCancel(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cancelled_) {
      int id = nextId_++;
      callbacks_.emplace(id, std::move(fn));
      return id;
    }
  }
  fn();
  return -1;
}

void Cancellation::unregister(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.erase(id);
}

bool Cancellation::sleepFor(std::chrono::milliseconds d) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, d, [this] { return cancelled_; });
}

}  // namespace rpcjob::kube
