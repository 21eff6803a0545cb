// rpcjob-worker's RPC observer (worker/tools/metrics_observer.h) over real
// metrics: what a call records, and that a call started while recording was
// paused (rpcjob/metrics/recording.h) records nothing at all, its end included,
// so the in-flight gauge stays balanced whatever the switch does meanwhile.

#include <map>
#include <string>

#include <gtest/gtest.h>

#include "metrics_observer.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/recording.h"

namespace rpcjob {
namespace {

using runtime::CallStatus;

// The value of the first series of `name` whose labels include `labels`
// (histograms: the sample count); -1 when there is none.
double value(const metrics::Metrics& m, const std::string& name,
             const std::map<std::string, std::string>& labels) {
  for (const auto& family : m.collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& label : metric.label)
          found = found || (label.name == k && label.value == v);
        match = match && found;
      }
      if (!match) continue;
      if (family.type == prometheus::MetricType::Histogram) {
        return static_cast<double>(metric.histogram.sample_count);
      }
      return family.type == prometheus::MetricType::Gauge ? metric.gauge.value
                                                          : metric.counter.value;
    }
  }
  return -1;
}

TEST(MetricsObserver, PausedCallsRecordNothingAndInFlightStaysBalanced) {
  metrics::Metrics m;
  worker::MetricsObserver observer(m.rpc(), {"f"});
  const std::map<std::string, std::string> ok{
      {"side", "client"}, {"function", "f"}, {"status", "ok"}};
  const std::map<std::string, std::string> client{{"side", "client"}};

  auto recorded = observer.callStarted("f", "w1");
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", client), 1);
  metrics::setRecording(false);
  auto paused = observer.callStarted("f", "w1");
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", client), 1);
  observer.callFinished("f", "w1", CallStatus::kOk, recorded);  // started recording: counted
  metrics::setRecording(true);
  observer.callFinished("f", "w1", CallStatus::kOk, paused);  // started paused: not counted
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", client), 0);
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total", ok), 1);
  EXPECT_EQ(value(m, "rpcjob_rpc_duration_seconds", {{"side", "client"}, {"function", "f"}}), 1);

  auto served = observer.serverCallStarted("f", "w1");
  observer.serverCallFinished("f", "w1", CallStatus::kRemoteError, served);
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total",
                  {{"side", "server"}, {"function", "f"}, {"status", "error"}}),
            1);
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", {{"side", "server"}}), 0);
}

}  // namespace
}  // namespace rpcjob
