#pragma once

// The set of rpcjob metrics of one process: a prometheus-cpp registry, the
// lock-free histogram families beside it, and the two groups of metrics the
// runtime feeds (ChannelMetrics: what TensorPipe's channels and transports move;
// RpcMetrics: calls, pipes, channel selection, worker info).

#include <memory>
#include <string>
#include <vector>

#include <prometheus/labels.h>
#include <prometheus/metric_family.h>

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace rpcjob {
namespace metrics {

class AtomicCounterFamily;
class AtomicFamilyBase;
class AtomicHistogramFamily;
class ChannelMetrics;
class InFlightGaugeFamily;
class RpcMetrics;

struct MetricsOptions {
  // false drops the `peer` label (it is exported as empty, which Prometheus
  // treats as absent): series then grow with channels and devices, not with the
  // number of workers. Turn it off for large jobs.
  bool peerLabel = true;
  // Labels put on every rpcjob series of this process, e.g.
  // {{"rpcjob_job", "resnet"}, {"worker", "worker3"}}. Constant per process, so
  // they cost no cardinality and let dashboards filter without joins.
  prometheus::Labels constantLabels;
};

// Thread safety: all members may be called from any thread. collect() is what
// the HTTP server calls on a scrape.
class Metrics {
 public:
  explicit Metrics(MetricsOptions options = {});
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  ChannelMetrics& channels() { return *channels_; }
  RpcMetrics& rpc() { return *rpc_; }

  // The registry behind the counters and gauges; other parts (the operator) may
  // register their own families here.
  prometheus::Registry& registry() { return *registry_; }

  // Every family, sorted by name: the registry's and the lock-free ones.
  std::vector<prometheus::MetricFamily> collect() const;

  // Create lock-free families that collect() includes (with the constant labels).
  AtomicCounterFamily& addCounterFamily(const std::string& name, const std::string& help);
  // `shards`: AtomicHistogram's (1, or thread_shard::kShards on the hot path).
  AtomicHistogramFamily& addHistogramFamily(const std::string& name, const std::string& help,
                                            std::vector<double> bounds, unsigned shards = 1);
  InFlightGaugeFamily& addInFlightFamily(const std::string& name, const std::string& help);

  const MetricsOptions& options() const { return options_; }
  // The value of the `peer` label for this peer (empty when the label is off).
  std::string peerLabel(const std::string& peer) const {
    return options_.peerLabel ? peer : std::string();
  }

 private:
  const MetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::unique_ptr<AtomicFamilyBase>> families_;
  std::unique_ptr<ChannelMetrics> channels_;
  std::unique_ptr<RpcMetrics> rpc_;
};

}  // namespace metrics
}  // namespace rpcjob
