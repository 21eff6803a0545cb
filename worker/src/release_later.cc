#include "release_later.h"

#include <utility>

namespace rpcjob::runtime {

void DeferredReleases::add(std::shared_ptr<void> object, size_t bytes, Clock::time_point now) {
  if (!enabled_) return;  // `object` goes here, at once
  std::vector<Item> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({std::move(object), now});
    bytes_ += bytes;
    if (items_.size() > kMaxItems || bytes_ > kMaxBytes) {
      takeAllLocked(released);
    } else {
      held_.store(items_.size(), std::memory_order_relaxed);
    }
  }
}  // released outside the lock: a destructor may add again

void DeferredReleases::releaseAll() {
  if (held() == 0) return;  // the common case, at every GPU step: no lock
  std::vector<Item> released;
  std::lock_guard<std::mutex> lock(mu_);
  takeAllLocked(released);  // `released` goes after the lock (declared first)
}

void DeferredReleases::releaseOlderThan(Clock::time_point now, Clock::duration age) {
  std::vector<Item> released;
  std::lock_guard<std::mutex> lock(mu_);
  // Items are in the order added: if the first is young enough, all are. The
  // byte count is the callers' estimate; it restarts with what is kept.
  if (items_.empty() || now - items_.front().added < age) return;
  takeAllLocked(released);
}

void DeferredReleases::takeAllLocked(std::vector<Item>& out) {
  out.swap(items_);
  bytes_ = 0;
  held_.store(0, std::memory_order_relaxed);
}

DeferredReleases& deferredReleases() {
#if RPCJOB_WITH_CUDA
  static auto* releases = new DeferredReleases(true);
#else
  static auto* releases = new DeferredReleases(false);
#endif
  return *releases;
}

void releaseLater(std::shared_ptr<void> object, size_t bytes) {
  deferredReleases().add(std::move(object), bytes, DeferredReleases::Clock::now());
}

void releaseDeferred() {
  deferredReleases().releaseAll();
}

namespace {
thread_local AfterGpuStep* innermost = nullptr;
}  // namespace

AfterGpuStep::AfterGpuStep(DeferredReleases& releases) : releases_(releases), outer_(innermost) {
  innermost = this;
}

AfterGpuStep::~AfterGpuStep() {
  innermost = outer_;
  if (stepped_) releases_.releaseAll();
}

void noteGpuStep() {
  if (innermost != nullptr) {
    innermost->stepped_ = true;
  } else {
    releaseDeferred();
  }
}

void releaseStale() {
  deferredReleases().releaseOlderThan(DeferredReleases::Clock::now(), DeferredReleases::kMaxAge);
}

}  // namespace rpcjob::runtime
