#pragma once
// Client-side rate limit (client-go's flowcontrol token bucket): `qps` tokens a
// second refill a bucket of `burst`; each request takes one, waiting for it when
// the bucket is empty. reserve() is pure in its clock (the caller sleeps), so it
// is tested without timing. Thread-safe.

#include <chrono>
#include <mutex>

namespace rpcjob::kube {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  // qps <= 0: no limit.
  TokenBucket(double qps, int burst);

  // Takes a token at `now`; returns how long the caller must wait before it may
  // send (zero when one was available). Tokens reserved ahead are owed: the next
  // caller waits behind them.
  std::chrono::nanoseconds reserve(Clock::time_point now);

 private:
  double qps_;
  double burst_;
  std::mutex mu_;
  double tokens_;
  Clock::time_point last_{};
  bool started_ = false;
};

}  // namespace rpcjob::kube
