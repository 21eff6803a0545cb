#pragma once

// Lock-free counters and histograms for the per-transfer hot path, and the
// collectable families that own them.
//
// Why not prometheus-cpp's: in prometheus-cpp 1.0.1 (Debian bookworm)
// Histogram::Observe takes a mutex, and Counter::Increment is a compare-and-swap
// loop on a double. Transfers are recorded on TensorPipe's loop threads, several
// times per message; integer fetch_adds are the cheapest thing that is still
// exact (bytes and counts are integers).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/labels.h>
#include <prometheus/metric_family.h>

#include "rpcjob/metrics/thread_shard.h"

namespace rpcjob {
namespace metrics {

// Thread safety: add() is lock-free and may be called from any thread.
// Each counter has a cache line of its own: counters of one label set are
// written by different threads (a transport's bytes sent by the thread that
// issues a write, its bytes received by the transport's loop), and neighbours
// on one line would make every add wait for the line to move between cores.
class AtomicCounter {
 public:
  void add(std::uint64_t n = 1) noexcept { value_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t value() const noexcept { return value_.load(std::memory_order_relaxed); }
  void fill(prometheus::ClientMetric& metric) const;
  static constexpr prometheus::MetricType kType = prometheus::MetricType::Counter;

 private:
  alignas(64) std::atomic<std::uint64_t> value_{0};
};

// A histogram of durations. Thread safety: observe() and observeNanos() are
// lock-free and may be called from any thread.
//
// Integer nanoseconds throughout: the bounds are converted once, an observation
// finds its bucket in O(1) (see observeNanos) and adds to two counters (its
// bucket, the sum), and seconds are computed at collect time. Resolution 1 ns.
// A scrape concurrent with observe() may see an observation in a bucket and not
// yet in the sum (or the reverse); the next scrape is consistent again. The
// count is the sum of the buckets, so count == the +Inf bucket always.
//
// With one shard every thread adds with relaxed fetch_adds. With
// thread_shard::kShards (the RPC latency, recorded for every call) each
// recording thread adds to buckets of its own with plain stores
// (thread_shard.h), and a scrape sums the shards: 6 KB per histogram instead
// of 200 bytes, so only hot-path histograms with few series take them.
class AtomicHistogram {
 public:
  // `bounds` are the finite upper bounds in seconds, ascending; `shards` is 1
  // or thread_shard::kShards.
  explicit AtomicHistogram(const std::vector<double>& bounds, unsigned shards = 1);

  void observe(double seconds) noexcept { observeNanos(toNanos(seconds)); }
  // Seconds as the integer nanoseconds observeNanos() takes: rounded, 0 for a
  // negative or NaN value, saturated at the largest.
  static std::uint64_t toNanos(double seconds) noexcept;
  // The hot path: an observation in nanoseconds.
  void observeNanos(std::uint64_t nanos) noexcept {
    // Prometheus buckets are "less than or equal": the first bound >= value.
    // Every bound below 2^k, k = floor(log2(nanos)), is below the value: start
    // at the first bound >= 2^k (a table by k), which leaves a step or two for
    // bounds spaced like 1-2.5-5 (a linear search from the first bound took up
    // to a dozen for RPC latencies of milliseconds).
    std::size_t index = firstAtLeast_[63 - __builtin_clzll(nanos | 1)];
    while (index < size_ && nanos > bounds_[index]) {
      ++index;
    }
    // One shard: the first, shared by every thread.
    const thread_shard::Mine shard = shards_ > 1 ? thread_shard::mine() : thread_shard::Mine{0};
    thread_shard::add(counter(shard.index, index), 1, shard.owned);
    thread_shard::add(counter(shard.index, size_ + 1), nanos, shard.owned);
  }

  // Observations so far (the sum of the buckets). Acquire loads: what a writer
  // published before an observation (with a release fence) is visible to a
  // caller that sees the observation counted.
  std::uint64_t count() const noexcept;
  // Snapshot in prometheus-cpp's form (cumulative buckets, +Inf last).
  prometheus::ClientMetric::Histogram snapshot() const;
  void fill(prometheus::ClientMetric& metric) const { metric.histogram = snapshot(); }
  static constexpr prometheus::MetricType kType = prometheus::MetricType::Histogram;

 private:
  // A shard's counters: size_ + 1 buckets (the last one +Inf, not cumulative),
  // then the sum, padded to whole cache lines so that shards share none.
  struct alignas(64) Line {
    std::atomic<std::uint64_t> value[8] = {};
  };
  std::atomic<std::uint64_t>& counter(unsigned shard, std::size_t i) const noexcept {
    const std::size_t at = shard * linesPerShard_ * 8 + i;
    return lines_[at / 8].value[at % 8];
  }

  const std::size_t size_;  // finite bounds
  const unsigned shards_;
  const std::size_t linesPerShard_;
  std::unique_ptr<std::uint64_t[]> bounds_;  // nanoseconds
  std::vector<double> seconds_;              // the same bounds as given, for the exposition
  // firstAtLeast_[k]: the first bucket whose bound is >= 2^k (0 for k = 0,
  // which also holds an observation of 0 ns).
  std::uint16_t firstAtLeast_[64];
  std::unique_ptr<Line[]> lines_;
};

// A gauge of things in flight (RPC calls): a monotonic counter of starts, and
// the histograms that time the ends -- every finished call is observed in
// exactly one of them, so their counts are the finished calls and a finish
// costs no increment of its own. Exported as started - finished at collect time
// (histogram counts read first, so a call is never seen finished and not
// started; clamped at 0 all the same).
// Thread safety: started() is lock-free, from any thread: each thread counts
// in a shard of its own (thread_shard.h; a call starts on the caller's thread),
// one cache line each. countFinishedIn() and value() take a mutex.
class InFlightGauge {
 public:
  InFlightGauge();
  void started() noexcept {
    const thread_shard::Mine shard = thread_shard::mine();
    thread_shard::add(started_[shard.index].value, 1, shard.owned);
  }
  // `histogram` times calls of this gauge from now on; it must outlive the gauge.
  void countFinishedIn(const AtomicHistogram& histogram);
  std::int64_t value() const;
  void fill(prometheus::ClientMetric& metric) const;
  static constexpr prometheus::MetricType kType = prometheus::MetricType::Gauge;

 private:
  struct alignas(64) Shard {
    std::atomic<std::uint64_t> value{0};
  };
  std::unique_ptr<Shard[]> started_;  // thread_shard::kShards
  mutable std::mutex mutex_;
  std::vector<const AtomicHistogram*> finished_;  // guarded by mutex_
};

// A family of metrics with one name, told apart by their labels.
// Thread safety: add() and Collect() take a mutex; the metrics they hand out
// stay valid (stable addresses) as long as the family lives.
class AtomicFamilyBase : public prometheus::Collectable {
 public:
  ~AtomicFamilyBase() override;
  std::vector<prometheus::MetricFamily> Collect() const override;

  // One labelled metric of the family (implementation detail of the families).
  struct Entry {
    virtual ~Entry() = default;
    virtual void fill(prometheus::ClientMetric& metric) const = 0;
    prometheus::Labels labels;
  };

 protected:
  AtomicFamilyBase(std::string name, std::string help, prometheus::MetricType type,
                   prometheus::Labels constantLabels);

  // Returns the entry with these labels, or creates it with `make`.
  Entry& find(const prometheus::Labels& labels, std::unique_ptr<Entry> (*make)(const void*),
              const void* arg);
  // Adds `entry` under `labels`; throws std::logic_error if they have one.
  void insert(const prometheus::Labels& labels, std::unique_ptr<Entry> entry);
  const std::string& name() const { return name_; }

 private:
  const std::string name_;
  const std::string help_;
  const prometheus::MetricType type_;
  const prometheus::Labels constantLabels_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Entry>> entries_;
};

class AtomicCounterFamily : public AtomicFamilyBase {
 public:
  AtomicCounterFamily(std::string name, std::string help, prometheus::Labels constantLabels = {});
  // The counter with these labels, created on first use. Callers cache the
  // reference: this is a lookup under a lock. Throws std::logic_error if the
  // labels name a computed series.
  AtomicCounter& add(const prometheus::Labels& labels);
  // A series whose value `value` computes when collected (under the family's
  // lock, so calls never overlap), for a count that other metrics already hold.
  // Exported as the largest value seen so far: a counter must not go down when
  // `value` reads its parts at different moments. Throws std::logic_error if
  // the labels have a series already.
  void addComputed(const prometheus::Labels& labels, std::function<std::uint64_t()> value);
};

class AtomicHistogramFamily : public AtomicFamilyBase {
 public:
  // `shards`: each histogram's (AtomicHistogram).
  AtomicHistogramFamily(std::string name, std::string help, std::vector<double> bounds,
                        prometheus::Labels constantLabels = {}, unsigned shards = 1);
  // The histogram with these labels, created on first use; cache the reference.
  AtomicHistogram& add(const prometheus::Labels& labels);
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  const unsigned shards_;
};

class InFlightGaugeFamily : public AtomicFamilyBase {
 public:
  InFlightGaugeFamily(std::string name, std::string help, prometheus::Labels constantLabels = {});
  // The gauge with these labels, created on first use; cache the reference.
  InFlightGauge& add(const prometheus::Labels& labels);
};

// Bucket bounds in seconds, from 1 us to 10 s (transfers, handshakes).
std::vector<double> transferDurationBuckets();
// Bucket bounds in seconds, from 5 us to 60 s (RPC latency).
std::vector<double> rpcDurationBuckets();

}  // namespace metrics
}  // namespace rpcjob
