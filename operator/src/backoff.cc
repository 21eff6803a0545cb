#include "rpcjob/operator/backoff.h"

#include <algorithm>

namespace rpcjob::kube {

Backoff::Backoff(const Options& options)
    : options_(options),
      currentMs_(static_cast<double>(options.initial.count())),
      rng_(options.seed != 0 ? options.seed
                             : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {
  options_.jitter = std::clamp(options_.jitter, 0.0, 0.999);
  options_.multiplier = std::max(options_.multiplier, 1.0);
}

double Backoff::uniform() {
  // 53 random bits into [0, 1), independent of the standard library's distributions.
  return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
}

std::chrono::milliseconds Backoff::next() {
  const double maxMs = static_cast<double>(options_.max.count());
  const double factor = 1.0 - options_.jitter + 2.0 * options_.jitter * uniform();
  const double delay = std::min(currentMs_ * factor, maxMs * (1.0 + options_.jitter));
  currentMs_ = std::min(currentMs_ * options_.multiplier, maxMs);
  return std::chrono::milliseconds(static_cast<int64_t>(delay));
}

void Backoff::reset() {
  currentMs_ = static_cast<double>(options_.initial.count());
}

}  // namespace rpcjob::kube
