#pragma once

// A histogram whose observe() is lock-free, and the collectable family that owns
// such histograms.
//
// Why not prometheus::Histogram: in prometheus-cpp 1.0.1 (Debian bookworm)
// Histogram::Observe takes a mutex. Transfers are observed on TensorPipe's loop
// threads, where a lock (even uncontended) is a cost we do not need to pay: a
// fixed set of atomic bucket counters does the job.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/labels.h>
#include <prometheus/metric_family.h>

namespace rpcjob {
namespace metrics {

// Thread safety: observe() is lock-free and may be called from any thread.
// collect() may run concurrently with observe(); it reads each counter
// atomically, so a scrape may see an observation in `count` and not yet in a
// bucket (or the reverse) -- the next scrape is consistent again.
class AtomicHistogram {
 public:
  // `bounds` are the finite upper bounds, ascending; they must outlive this object.
  explicit AtomicHistogram(const std::vector<double>& bounds);

  void observe(double value) noexcept;

  // Snapshot in prometheus-cpp's form (cumulative buckets, +Inf last).
  prometheus::ClientMetric::Histogram snapshot() const;

 private:
  const std::vector<double>& bounds_;
  // bounds_.size() + 1 non-cumulative counters; the last one is +Inf.
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;
  std::atomic<std::uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

// A family of AtomicHistograms with one name, told apart by their labels.
// Thread safety: add() and Collect() take a mutex; the histograms they hand out
// stay valid (stable addresses) as long as the family lives.
class AtomicHistogramFamily : public prometheus::Collectable {
 public:
  AtomicHistogramFamily(std::string name, std::string help, std::vector<double> bounds,
                        prometheus::Labels constantLabels = {});
  ~AtomicHistogramFamily() override;

  // Returns the histogram with these labels, creating it on first use. Callers
  // cache the reference: this is a map lookup under a lock.
  AtomicHistogram& add(const prometheus::Labels& labels);

  std::vector<prometheus::MetricFamily> Collect() const override;

  const std::vector<double>& bounds() const { return bounds_; }

 private:
  struct Entry;
  const std::string name_;
  const std::string help_;
  const std::vector<double> bounds_;
  const prometheus::Labels constantLabels_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

// Bucket bounds in seconds, from 1 us to 10 s (transfers, handshakes).
std::vector<double> transferDurationBuckets();
// Bucket bounds in seconds, from 5 us to 60 s (RPC latency).
std::vector<double> rpcDurationBuckets();

}  // namespace metrics
}  // namespace rpcjob
