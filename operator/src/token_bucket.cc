#include "rpcjob/operator/token_bucket.h"

#include <algorithm>

namespace rpcjob::kube {

TokenBucket::TokenBucket(double qps, int burst)
    : qps_(qps), burst_(std::max(1, burst)), tokens_(std::max(1, burst)) {}

std::chrono::nanoseconds TokenBucket::reserve(Clock::time_point now) {
  if (qps_ <= 0) return std::chrono::nanoseconds(0);
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ && now > last_) {
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
  }
  if (!started_ || now > last_) last_ = now;
  started_ = true;
  tokens_ -= 1;
  if (tokens_ >= 0) return std::chrono::nanoseconds(0);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(-tokens_ / qps_));
}

}  // namespace rpcjob::kube
