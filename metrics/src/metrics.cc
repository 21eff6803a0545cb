#include "rpcjob/metrics/metrics.h"

#include <algorithm>

#include <prometheus/registry.h>

#include "rpcjob/metrics/atomic_metrics.h"
#include "rpcjob/metrics/channel_metrics.h"
#include "rpcjob/metrics/rpc_metrics.h"

namespace rpcjob {
namespace metrics {

Metrics::Metrics(MetricsOptions options)
    : options_(std::move(options)), registry_(std::make_shared<prometheus::Registry>()) {
  channels_ = std::make_unique<ChannelMetrics>(*this);
  rpc_ = std::make_unique<RpcMetrics>(*this);
}

Metrics::~Metrics() = default;

AtomicCounterFamily& Metrics::addCounterFamily(const std::string& name, const std::string& help) {
  auto family = std::make_unique<AtomicCounterFamily>(name, help, options_.constantLabels);
  auto& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

AtomicHistogramFamily& Metrics::addHistogramFamily(const std::string& name, const std::string& help,
                                                   std::vector<double> bounds, unsigned shards) {
  auto family = std::make_unique<AtomicHistogramFamily>(name, help, std::move(bounds),
                                                        options_.constantLabels, shards);
  auto& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

InFlightGaugeFamily& Metrics::addInFlightFamily(const std::string& name, const std::string& help) {
  auto family = std::make_unique<InFlightGaugeFamily>(name, help, options_.constantLabels);
  auto& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

std::vector<prometheus::MetricFamily> Metrics::collect() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (const auto& atomicFamily : families_) {
    for (auto& family : atomicFamily->Collect()) {
      families.push_back(std::move(family));
    }
  }
  std::sort(families.begin(), families.end(),
            [](const prometheus::MetricFamily& a, const prometheus::MetricFamily& b) {
              return a.name < b.name;
            });
  return families;
}

}  // namespace metrics
}  // namespace rpcjob
