#include "rpcjob/metrics/atomic_metrics.h"

#include <algorithm>
#include <limits>
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

AtomicHistogram::AtomicHistogram(const std::vector<double>& bounds)
    : bounds_(bounds), buckets_(new std::atomic<std::uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    buckets_[i].store(0, std::memory_order_relaxed);
  }
}

void AtomicHistogram::observe(double value) noexcept {
  // Prometheus buckets are "less than or equal": the first bound >= value.
  const size_t index = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[index].fetch_add(1, std::memory_order_relaxed);
  double sum = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(sum, sum + value, std::memory_order_relaxed)) {
  }
}

prometheus::ClientMetric::Histogram AtomicHistogram::snapshot() const {
  prometheus::ClientMetric::Histogram out;
  std::uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    prometheus::ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
    out.bucket.push_back(bucket);
  }
  out.sample_count = cumulative;
  out.sample_sum = sum_.load(std::memory_order_relaxed);
  return out;
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

struct HistogramEntry : AtomicFamilyBase::Entry {
  explicit HistogramEntry(const std::vector<double>& bounds) : histogram(bounds) {}
  void fill(prometheus::ClientMetric& metric) const override { histogram.fill(metric); }
  AtomicHistogram histogram;
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
  return static_cast<CounterEntry&>(entry).counter;
}

AtomicHistogramFamily::AtomicHistogramFamily(std::string name, std::string help,
                                             std::vector<double> bounds,
                                             prometheus::Labels constantLabels)
    : AtomicFamilyBase(std::move(name), std::move(help), AtomicHistogram::kType,
                       std::move(constantLabels)),
      bounds_(sorted(std::move(bounds))) {}

AtomicHistogram& AtomicHistogramFamily::add(const prometheus::Labels& labels) {
  auto& entry = find(
      labels,
      [](const void* bounds) -> std::unique_ptr<Entry> {
        return std::make_unique<HistogramEntry>(*static_cast<const std::vector<double>*>(bounds));
      },
      &bounds_);
  return static_cast<HistogramEntry&>(entry).histogram;
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
