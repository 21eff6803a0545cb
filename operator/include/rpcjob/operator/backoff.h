#pragma once
// Exponential backoff with jitter, for watch restarts, retries and leader-election
// retries. Modelled on gRPC core's backoff (doc/connection-backoff.md).
//
// Spec:
//   current = initial
//   next():  delay   = current * U(1 - jitter, 1 + jitter)     (U: uniform)
//            current = min(current * multiplier, max)
//            return min(delay, max * (1 + jitter))
//   reset(): current = initial
// `jitter` is in [0, 1). The random source is a std::mt19937_64 seeded from the
// options (same seed, same delays: tests are deterministic); U is computed from
// its raw 64-bit output, so the sequence is the same with every standard library.
//
// Thread-safety: none; one Backoff per retry loop.

#include <chrono>
#include <cstdint>
#include <random>

namespace rpcjob::kube {

class Backoff {
 public:
  struct Options {
    std::chrono::milliseconds initial{1000};
    double multiplier = 1.6;
    double jitter = 0.2;
    std::chrono::milliseconds max{std::chrono::seconds(120)};
    // 0: seed from std::random_device.
    uint64_t seed = 0;

    Options& setInitial(std::chrono::milliseconds v) {
      initial = v;
      return *this;
    }
    Options& setMultiplier(double v) {
      multiplier = v;
      return *this;
    }
    Options& setJitter(double v) {
      jitter = v;
      return *this;
    }
    Options& setMax(std::chrono::milliseconds v) {
      max = v;
      return *this;
    }
    Options& setSeed(uint64_t v) {
      seed = v;
      return *this;
    }
  };

  explicit Backoff(const Options& options);

  // The delay before the next attempt; grows the base for the one after.
  std::chrono::milliseconds next();
  // After a success: the next delay starts from `initial` again.
  void reset();

 private:
  double uniform();  // in [0, 1)

  Options options_;
  double currentMs_;
  std::mt19937_64 rng_;
};

}  // namespace rpcjob::kube
