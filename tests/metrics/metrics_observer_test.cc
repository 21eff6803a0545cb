// The RPC observer of rpcjob_telemetry (worker/telemetry/src/metrics_observer.h) over real
// metrics: what a call records, and that a call started while recording was
// paused (rpcjob/metrics/recording.h) records nothing at all, its end included,
// so the in-flight gauge stays balanced whatever the switch does meanwhile.

#include <cstdlib>
#include <map>
#include <new>
#include <string>

#include <gtest/gtest.h>

#include "metrics_observer.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/recording.h"

// Allocation failure on demand, for this binary: while set, operator new throws.
namespace {
thread_local bool tFailAllocations = false;
}  // namespace

void* operator new(std::size_t size) {
  if (tFailAllocations) throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace rpcjob {
namespace {

using runtime::CallStatus;
using runtime::EventTime;

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
  telemetry::MetricsObserver observer(m.rpc(), {"f"});
  const std::map<std::string, std::string> ok{
      {"side", "client"}, {"function", "f"}, {"status", "ok"}};
  const std::map<std::string, std::string> client{{"side", "client"}};

  auto recorded = observer.callStarted("f", "w1", EventTime());
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", client), 1);
  metrics::setRecording(false);
  auto paused = observer.callStarted("f", "w1", EventTime());
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", client), 1);
  // started recording: counted
  observer.callFinished("f", "w1", CallStatus::kOk, recorded, EventTime());
  metrics::setRecording(true);
  // started paused: not counted
  observer.callFinished("f", "w1", CallStatus::kOk, paused, EventTime());
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", client), 0);
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total", ok), 1);
  EXPECT_EQ(value(m, "rpcjob_rpc_duration_seconds", {{"side", "client"}, {"function", "f"}}), 1);

  auto served = observer.serverCallStarted("f", "w1", EventTime());
  observer.serverCallFinished("f", "w1", CallStatus::kRemoteError, served, EventTime());
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total",
                  {{"side", "server"}, {"function", "f"}, {"status", "error"}}),
            1);
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", {{"side", "server"}}), 0);
}

// Refused handshakes are counted by reason, paused or not: a security signal,
// not a performance figure.
TEST(MetricsObserver, CountsRefusedHandshakesByReasonEvenWhilePaused) {
  metrics::Metrics m;
  telemetry::MetricsObserver observer(m.rpc(), {"f"});
  observer.handshakeFailed("bad_proof");
  metrics::setRecording(false);
  observer.handshakeFailed("bad_proof");
  observer.handshakeFailed("timeout");
  metrics::setRecording(true);
  EXPECT_EQ(value(m, "rpcjob_rpc_handshake_failures_total", {{"reason", "bad_proof"}}), 2);
  EXPECT_EQ(value(m, "rpcjob_rpc_handshake_failures_total", {{"reason", "timeout"}}), 1);
}

// The observer pauses with its own recorder, not with the decorators'.
TEST(MetricsObserver, PausesWithItsOwnRecorderOnly) {
  metrics::Metrics m;
  telemetry::MetricsObserver observer(m.rpc(), {"f"});
  const std::map<std::string, std::string> ok{
      {"side", "client"}, {"function", "f"}, {"status", "ok"}};
  metrics::setRecording(static_cast<unsigned>(metrics::Recorder::kObserver));
  observer.callFinished("f", "w1", CallStatus::kOk, observer.callStarted("f", "w1", EventTime()),
                        EventTime());
  metrics::setRecording(metrics::kAllRecorders &
                        ~static_cast<unsigned>(metrics::Recorder::kObserver));
  observer.callFinished("f", "w1", CallStatus::kOk, observer.callStarted("f", "w1", EventTime()),
                        EventTime());
  metrics::setRecording(true);
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total", ok), 1);
}

// Metrics never fail a call or take the worker down: when a new function's or
// a new status's series cannot be allocated, the call goes unrecorded and the
// observer does not throw (callStarted runs in a caller's rpcAsync, the served
// side and every finish on TensorPipe's loop threads).
TEST(MetricsObserver, OutOfMemoryLeavesTheCallUnrecordedWithoutThrowing) {
  metrics::Metrics m;
  telemetry::MetricsObserver observer(m.rpc(), {"known"});
  runtime::Observer::CallToken client, server;
  tFailAllocations = true;
  EXPECT_NO_THROW(client = observer.callStarted("new-function", "w1", EventTime()));
  EXPECT_NO_THROW(server = observer.serverCallStarted("new-function", "w1", EventTime()));
  tFailAllocations = false;
  EXPECT_NO_THROW(
      observer.callFinished("new-function", "w1", CallStatus::kOk, client, EventTime()));
  EXPECT_NO_THROW(
      observer.serverCallFinished("new-function", "w1", CallStatus::kOk, server, EventTime()));
  EXPECT_EQ(value(m, "rpcjob_rpc_in_flight", {{"side", "client"}}), 0);
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total", {{"function", "new-function"}}), -1);

  // A known function whose first "connection" failure cannot create its series.
  auto call = observer.callStarted("known", "w1", EventTime());
  tFailAllocations = true;
  EXPECT_NO_THROW(observer.callFinished("known", "w1", CallStatus::kConnection, call, EventTime()));
  tFailAllocations = false;
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total", {{"function", "known"}, {"status", "connection"}}),
            -1);
  // ... and the next one, with memory again, is counted.
  call = observer.callStarted("known", "w1", EventTime());
  observer.callFinished("known", "w1", CallStatus::kConnection, call, EventTime());
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total", {{"function", "known"}, {"status", "connection"}}),
            1);
}

// The sum of the latency histogram's observations, in seconds.
double durationSum(const metrics::Metrics& m, const std::string& side) {
  for (const auto& family : m.collect()) {
    if (family.name != "rpcjob_rpc_duration_seconds") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "side" && label.value == side) return metric.histogram.sample_sum;
      }
    }
  }
  return -1;
}

// Latencies are the differences of the times the runtime hands over (a call's
// start, a message's arrival), to the nanosecond; a time before the start
// (never from one steady clock) counts as 0, not as ~584 years.
TEST(MetricsObserver, LatencyIsTheDifferenceOfTheRuntimesTimes) {
  metrics::Metrics m;
  telemetry::MetricsObserver observer(m.rpc(), {"f"});
  const auto t0 = EventTime::Clock::now();
  auto call = observer.callStarted("f", "w1", EventTime(t0));
  observer.callFinished("f", "w1", CallStatus::kOk, call,
                        EventTime(t0 + std::chrono::microseconds(2500)));
  EXPECT_DOUBLE_EQ(durationSum(m, "client"), 0.0025);
  auto late = observer.callStarted("f", "w1", EventTime(t0));
  observer.callFinished("f", "w1", CallStatus::kTimeout, late,
                        EventTime(t0 - std::chrono::seconds(1)));
  EXPECT_DOUBLE_EQ(durationSum(m, "client"), 0.0025);
  EXPECT_EQ(value(m, "rpcjob_rpc_calls_total",
                  {{"side", "client"}, {"function", "f"}, {"status", "timeout"}}),
            1);

  // The calls of one message share its arrival: the time is read once.
  const EventTime arrived;
  auto a = observer.serverCallStarted("f", "w1", arrived);
  auto b = observer.serverCallStarted("f", "w1", arrived);
  const auto read = arrived.get();
  observer.serverCallFinished("f", "w1", CallStatus::kOk, a,
                              EventTime(read + std::chrono::milliseconds(1)));
  observer.serverCallFinished("f", "w1", CallStatus::kOk, b,
                              EventTime(read + std::chrono::milliseconds(3)));
  EXPECT_DOUBLE_EQ(durationSum(m, "server"), 0.004);
}

}  // namespace
}  // namespace rpcjob
