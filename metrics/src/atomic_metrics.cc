#include "rpcjob/metrics/atomic_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace rpcjob {
namespace metrics {
namespace {

std::vector<double> sorted(std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  return bounds;
}

}  // namespace

void AtomicCounter::fill(prometheus::ClientMetric& metric) const {
  metric.counter.value = static_cast<double>(value());
}

std::uint64_t AtomicHistogram::toNanos(double seconds) noexcept {
  if (!(seconds > 0)) {
    return 0;  // negative, zero, NaN
  }
  const double nanos = std::round(seconds * 1e9);
  return nanos >= 1.8e19 ? std::numeric_limits<std::uint64_t>::max()
                         : static_cast<std::uint64_t>(nanos);
}

AtomicHistogram::AtomicHistogram(const std::vector<double>& bounds, unsigned shards)
    : size_(bounds.size()),
      shards_(shards),
      linesPerShard_((bounds.size() + 2 + 7) / 8),
      bounds_(new std::uint64_t[bounds.size()]),
      seconds_(bounds) {
  if (size_ > std::numeric_limits<std::uint16_t>::max()) {
    throw std::invalid_argument("AtomicHistogram: too many buckets");
  }
  if (shards != 1 && shards != thread_shard::kShards) {
    throw std::invalid_argument("AtomicHistogram: shards must be 1 or thread_shard::kShards");
  }
  for (size_t i = 0; i < size_; ++i) {
    bounds_[i] = toNanos(bounds[i]);
  }
  firstAtLeast_[0] = 0;
  for (int k = 1; k < 64; ++k) {
    const std::uint64_t power = std::uint64_t{1} << k;
    std::size_t first = 0;
    while (first < size_ && bounds_[first] < power) {
      ++first;
    }
    firstAtLeast_[k] = static_cast<std::uint16_t>(first);
  }
  lines_.reset(new Line[shards_ * linesPerShard_]);  // zeroed
}

std::uint64_t AtomicHistogram::count() const noexcept {
  std::uint64_t total = 0;
  for (unsigned shard = 0; shard < shards_; ++shard) {
    for (size_t i = 0; i <= size_; ++i) {
      total += counter(shard, i).load(std::memory_order_acquire);
    }
  }
  return total;
}

prometheus::ClientMetric::Histogram AtomicHistogram::snapshot() const {
  prometheus::ClientMetric::Histogram out;
  std::uint64_t cumulative = 0;
  out.bucket.reserve(size_ + 1);
  for (size_t i = 0; i <= size_; ++i) {
    for (unsigned shard = 0; shard < shards_; ++shard) {
      cumulative += counter(shard, i).load(std::memory_order_relaxed);
    }
    prometheus::ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < size_ ? seconds_[i] : std::numeric_limits<double>::infinity();
    out.bucket.push_back(bucket);
  }
  out.sample_count = cumulative;
  std::uint64_t sumNanos = 0;
  for (unsigned shard = 0; shard < shards_; ++shard) {
    sumNanos += counter(shard, size_ + 1).load(std::memory_order_relaxed);
  }
  // Divided, not multiplied by 1e-9: exact for whole milliseconds and seconds.
  out.sample_sum = static_cast<double>(sumNanos) / 1e9;
  return out;
}

InFlightGauge::InFlightGauge() : started_(new Shard[thread_shard::kShards]) {}

void InFlightGauge::countFinishedIn(const AtomicHistogram& histogram) {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_.push_back(&histogram);
}

std::int64_t InFlightGauge::value() const {
  // Finished first: a call is counted as started before it finishes, so this
  // order never reads more finished than started calls (clamped anyway).
  std::uint64_t finished = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const AtomicHistogram* histogram : finished_) {
      finished += histogram->count();
    }
  }
  std::uint64_t started = 0;
  for (unsigned shard = 0; shard < thread_shard::kShards; ++shard) {
    started += started_[shard].value.load(std::memory_order_acquire);
  }
  return started > finished ? static_cast<std::int64_t>(started - finished) : 0;
}

void InFlightGauge::fill(prometheus::ClientMetric& metric) const {
  metric.gauge.value = static_cast<double>(value());
}

AtomicFamilyBase::AtomicFamilyBase(std::string name, std::string help, prometheus::MetricType type,
                                   prometheus::Labels constantLabels)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      constantLabels_(std::move(constantLabels)) {}

AtomicFamilyBase::~AtomicFamilyBase() = default;

AtomicFamilyBase::Entry& AtomicFamilyBase::find(const prometheus::Labels& labels,
                                                std::unique_ptr<Entry> (*make)(const void*),
                                                const void* arg) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& entry : entries_) {
    if (entry->labels == labels) {
      return *entry;
    }
  }
  entries_.push_back(make(arg));
  entries_.back()->labels = labels;
  return *entries_.back();
}

void AtomicFamilyBase::insert(const prometheus::Labels& labels, std::unique_ptr<Entry> entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& existing : entries_) {
    if (existing->labels == labels) {
      throw std::logic_error(name_ + ": a series with these labels exists already");
    }
  }
  entry->labels = labels;
  entries_.push_back(std::move(entry));
}

std::vector<prometheus::MetricFamily> AtomicFamilyBase::Collect() const {
  prometheus::MetricFamily family;
  family.name = name_;
  family.help = help_;
  family.type = type_;
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_.empty()) {
    return {};  // like prometheus-cpp: no series, no family
  }
  for (const auto& entry : entries_) {
    prometheus::ClientMetric metric;
    // Constant labels first, as prometheus-cpp's own families do.
    for (const auto& [name, value] : constantLabels_) {
      metric.label.push_back({name, value});
    }
    for (const auto& [name, value] : entry->labels) {
      metric.label.push_back({name, value});
    }
    entry->fill(metric);
    family.metric.push_back(std::move(metric));
  }
  return {std::move(family)};
}

namespace {

struct CounterEntry : AtomicFamilyBase::Entry {
  void fill(prometheus::ClientMetric& metric) const override { counter.fill(metric); }
  AtomicCounter counter;
};

// Collect() holds the family's lock while it fills, so `highest` needs none.
struct ComputedCounterEntry : AtomicFamilyBase::Entry {
  explicit ComputedCounterEntry(std::function<std::uint64_t()> f) : value(std::move(f)) {}
  void fill(prometheus::ClientMetric& metric) const override {
    highest = std::max(highest, value());
    metric.counter.value = static_cast<double>(highest);
  }
  const std::function<std::uint64_t()> value;
  mutable std::uint64_t highest = 0;
};

struct HistogramEntry : AtomicFamilyBase::Entry {
  HistogramEntry(const std::vector<double>& bounds, unsigned shards) : histogram(bounds, shards) {}
  void fill(prometheus::ClientMetric& metric) const override { histogram.fill(metric); }
  AtomicHistogram histogram;
};

struct InFlightEntry : AtomicFamilyBase::Entry {
  void fill(prometheus::ClientMetric& metric) const override { gauge.fill(metric); }
  InFlightGauge gauge;
};

}  // namespace

AtomicCounterFamily::AtomicCounterFamily(std::string name, std::string help,
                                         prometheus::Labels constantLabels)
    : AtomicFamilyBase(std::move(name), std::move(help), AtomicCounter::kType,
                       std::move(constantLabels)) {}

AtomicCounter& AtomicCounterFamily::add(const prometheus::Labels& labels) {
  auto& entry = find(
      labels,
      [](const void*) -> std::unique_ptr<Entry> { return std::make_unique<CounterEntry>(); },
      nullptr);
  // The labels may name a computed series (addComputed), which has no counter.
  auto* counter = dynamic_cast<CounterEntry*>(&entry);
  if (counter == nullptr) {
    throw std::logic_error(name() + ": the series with these labels is computed, not added to");
  }
  return counter->counter;
}

void AtomicCounterFamily::addComputed(const prometheus::Labels& labels,
                                      std::function<std::uint64_t()> value) {
  insert(labels, std::make_unique<ComputedCounterEntry>(std::move(value)));
}

AtomicHistogramFamily::AtomicHistogramFamily(std::string name, std::string help,
                                             std::vector<double> bounds,
                                             prometheus::Labels constantLabels, unsigned shards)
    : AtomicFamilyBase(std::move(name), std::move(help), AtomicHistogram::kType,
                       std::move(constantLabels)),
      bounds_(sorted(std::move(bounds))),
      shards_(shards) {}

AtomicHistogram& AtomicHistogramFamily::add(const prometheus::Labels& labels) {
  auto& entry = find(
      labels,
      [](const void* family) -> std::unique_ptr<Entry> {
        const auto* self = static_cast<const AtomicHistogramFamily*>(family);
        return std::make_unique<HistogramEntry>(self->bounds_, self->shards_);
      },
      this);
  return static_cast<HistogramEntry&>(entry).histogram;
}

InFlightGaugeFamily::InFlightGaugeFamily(std::string name, std::string help,
                                         prometheus::Labels constantLabels)
    : AtomicFamilyBase(std::move(name), std::move(help), InFlightGauge::kType,
                       std::move(constantLabels)) {}

InFlightGauge& InFlightGaugeFamily::add(const prometheus::Labels& labels) {
  auto& entry = find(
      labels,
      [](const void*) -> std::unique_ptr<Entry> { return std::make_unique<InFlightEntry>(); },
      nullptr);
  return static_cast<InFlightEntry&>(entry).gauge;
}

std::vector<double> transferDurationBuckets() {
  return {1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
          5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0};
}

std::vector<double> rpcDurationBuckets() {
  return {5e-6,   1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
          2.5e-2, 5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0,  10.0,   30.0, 60.0};
}

}  // namespace metrics
}  // namespace rpcjob
