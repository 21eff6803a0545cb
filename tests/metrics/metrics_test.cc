// Metric definitions: names, labels, handles, histograms, the README.

#include <atomic>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/counter.h>

#include "rpcjob/metrics/atomic_metrics.h"
#include "rpcjob/metrics/channel_metrics.h"
#include "rpcjob/metrics/http_server.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/names.h"
#include "rpcjob/metrics/recording.h"
#include "rpcjob/metrics/rpc_metrics.h"
#include "rpcjob/metrics/thread_shard.h"
#include "rpcjob/metrics/tick_clock.h"

namespace rpcjob {
namespace metrics {
namespace {

std::string text(const Metrics& m) {
  return HttpServer::serialize(m.collect());
}

bool has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(AtomicHistogram, BucketsAreCumulativeAndInclusive) {
  std::vector<double> bounds{1, 2, 4};
  AtomicHistogram h(bounds);
  for (double v : {0.5, 1.0, 1.5, 4.0, 9.0}) h.observe(v);
  auto s = h.snapshot();
  ASSERT_EQ(s.bucket.size(), 4u);
  EXPECT_EQ(s.bucket[0].cumulative_count, 2u);  // <= 1
  EXPECT_EQ(s.bucket[1].cumulative_count, 3u);  // <= 2
  EXPECT_EQ(s.bucket[2].cumulative_count, 4u);  // <= 4
  EXPECT_EQ(s.bucket[3].cumulative_count, 5u);  // +Inf
  EXPECT_EQ(s.sample_count, 5u);
  EXPECT_DOUBLE_EQ(s.sample_sum, 16.0);
}

TEST(AtomicHistogram, ConcurrentObservationsAreAllCounted) {
  std::vector<double> bounds = transferDurationBuckets();
  AtomicHistogram h(bounds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.observe(1e-3);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.snapshot().sample_count, 40000u);
  EXPECT_NEAR(h.snapshot().sample_sum, 40.0, 1e-6);
}

TEST(AtomicHistogram, NanosecondObservationsMatchSeconds) {
  std::vector<double> bounds{1e-6, 1e-3};
  AtomicHistogram h(bounds);
  h.observeNanos(1000);  // == 1 us: in the first bucket (inclusive)
  h.observeNanos(1001);  // second
  h.observe(2e-3);       // +Inf
  h.observe(-1.0);       // clamped to 0: first
  auto s = h.snapshot();
  ASSERT_EQ(s.bucket.size(), 3u);
  EXPECT_EQ(s.bucket[0].cumulative_count, 2u);
  EXPECT_EQ(s.bucket[1].cumulative_count, 3u);
  EXPECT_EQ(s.bucket[2].cumulative_count, 4u);
  EXPECT_DOUBLE_EQ(s.bucket[0].upper_bound, 1e-6);
  EXPECT_DOUBLE_EQ(s.sample_sum, 2001e-9 + 2e-3);
}

// The O(1) bucket search against the plain definition (the first bound >= the
// value), on the product's bounds and on bounds that stress the log2 table: a
// bound of 0 ns, bounds that share an octave, bounds at powers of two, one huge.
TEST(AtomicHistogram, BucketSearchMatchesTheDefinition) {
  const std::vector<std::vector<double>> boundSets = {
      transferDurationBuckets(),
      rpcDurationBuckets(),
      {0.0, 1e-9, 2e-9, 3e-9, 4e-9},
      {1e-6, 1.1e-6, 1.2e-6, 1.3e-6, 2.048e-6, 4.096e-6, 1e9},
      {}};
  for (const auto& seconds : boundSets) {
    std::vector<std::uint64_t> nanos;
    for (double b : seconds) nanos.push_back(static_cast<std::uint64_t>(std::llround(b * 1e9)));
    // Values: 0..4100, every bound and its neighbours, every power of two and
    // its neighbours, the largest value.
    std::vector<std::uint64_t> values;
    for (std::uint64_t v = 0; v <= 4100; ++v) values.push_back(v);
    for (std::uint64_t b : nanos) {
      for (std::uint64_t v : {b - 1, b, b + 1}) values.push_back(v);
    }
    for (int k = 0; k < 64; ++k) {
      const std::uint64_t p = std::uint64_t{1} << k;
      for (std::uint64_t v : {p - 1, p, p + 1}) values.push_back(v);
    }
    values.push_back(~std::uint64_t{0});
    for (std::uint64_t value : values) {
      std::size_t expected = 0;
      while (expected < nanos.size() && value > nanos[expected]) ++expected;
      AtomicHistogram h(seconds);
      h.observeNanos(value);
      const auto s = h.snapshot();
      std::size_t got = 0;
      while (s.bucket[got].cumulative_count == 0) ++got;
      ASSERT_EQ(got, expected) << "value " << value << " ns, " << seconds.size() << " bounds";
    }
  }
}

TEST(InFlightGauge, StartedMinusTheCallsItsHistogramsTimed) {
  InFlightGauge g;
  AtomicHistogram a(rpcDurationBuckets()), b(rpcDurationBuckets());
  g.countFinishedIn(a);
  g.countFinishedIn(b);
  g.started();
  g.started();
  g.started();
  a.observeNanos(1000);
  EXPECT_EQ(g.value(), 2);
  b.observeNanos(5'000'000'000);
  a.observe(0.5);
  EXPECT_EQ(g.value(), 0);
  b.observe(0.1);  // a finish without a start (never in the runtime): clamped
  EXPECT_EQ(g.value(), 0);
}

// Per-thread shards (thread_shard.h): more threads than there are owned shards,
// in waves, so that threads that exit give their shard to later ones, which go
// on adding to it; the shared shard's threads add at the same time. Nothing is
// lost, and sums are the same as one set of buckets gets.
TEST(AtomicHistogram, ShardedObservationsFromManyThreadsAreAllCounted) {
  const auto bounds = rpcDurationBuckets();
  AtomicHistogram sharded(bounds, thread_shard::kShards), single(bounds);
  InFlightGauge gauge;
  gauge.countFinishedIn(sharded);
  constexpr int kWaves = 3, kThreads = 40, kEach = 5000;
  static_assert(kThreads > static_cast<int>(thread_shard::kOwnedShards), "some share a shard");
  for (int wave = 0; wave < kWaves; ++wave) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          const std::uint64_t nanos = 1000 * static_cast<std::uint64_t>(t + i % 7);
          gauge.started();
          sharded.observeNanos(nanos);
          single.observeNanos(nanos);
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  const std::uint64_t total = std::uint64_t{kWaves} * kThreads * kEach;
  EXPECT_EQ(sharded.count(), total);
  EXPECT_EQ(gauge.value(), 0);
  const auto a = sharded.snapshot(), b = single.snapshot();
  EXPECT_EQ(a.sample_count, total);
  EXPECT_DOUBLE_EQ(a.sample_sum, b.sample_sum);
  ASSERT_EQ(a.bucket.size(), b.bucket.size());
  for (size_t i = 0; i < a.bucket.size(); ++i) {
    EXPECT_EQ(a.bucket[i].cumulative_count, b.bucket[i].cumulative_count) << "bucket " << i;
  }
}

TEST(AtomicHistogram, TakesOneShardOrOnePerThread) {
  EXPECT_THROW(AtomicHistogram(rpcDurationBuckets(), 2), std::invalid_argument);
  EXPECT_NO_THROW(AtomicHistogram(rpcDurationBuckets(), thread_shard::kShards));
}

// The counter's calibration (tick_clock.cc) on a simulated counter of 2.5
// ticks per ns: a reading whose thread was preempted between its two counter
// reads (the first, and every 7th) is skipped, not averaged in; with nothing
// but such readings there is no rate (the steady clock is used instead).
TEST(TickClock, CalibrationSkipsReadingsInterruptedBetweenTheirReads) {
  std::uint64_t tsc = 1'000'000;
  int n = 0;
  auto read = [&] {
    tick_clock::TickReading r;
    r.before = tsc;
    tsc += 50;  // 20 ns to the clock's moment
    r.steadyNs = static_cast<std::int64_t>(static_cast<double>(tsc) / 2.5);
    tsc += 50;
    if (n++ % 7 == 0) tsc += 2'500'000;  // preempted for 1 ms
    r.after = tsc;
    tsc += 100;
    return r;
  };
  EXPECT_NEAR(tick_clock::calibrate(read, 2'000'000), 0.4, 0.4e-3);
  auto alwaysPreempted = [&] {
    tick_clock::TickReading r;
    r.before = tsc;
    r.steadyNs = static_cast<std::int64_t>(static_cast<double>(tsc) / 2.5);
    tsc += 2'500'000;
    r.after = tsc;
    return r;
  };
  EXPECT_EQ(tick_clock::calibrate(alwaysPreempted, 2'000'000), 0.0);
}

TEST(ThreadShard, ThreadsAliveAtOnceOwnDifferentShards) {
  // Every thread holds its index until all have taken one: owned indices are
  // distinct, and the rest get the shared one.
  constexpr int kThreads = 48;
  std::vector<unsigned> indices(kThreads);
  std::atomic<int> taken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      indices[t] = thread_shard::index();
      taken++;
      while (taken.load() < kThreads) std::this_thread::yield();
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int> owners(thread_shard::kShards);
  for (unsigned index : indices) {
    ASSERT_LT(index, thread_shard::kShards);
    owners[index]++;
  }
  for (unsigned i = 0; i < thread_shard::kOwnedShards; ++i) EXPECT_LE(owners[i], 1) << i;
}

TEST(AtomicCounterFamily, ComputedSeriesNeverDecreaseAndLabelsStayUnique) {
  AtomicCounterFamily family("rpcjob_x_total", "x");
  std::uint64_t value = 5;
  family.addComputed({{"k", "v"}}, [&value] { return value; });
  auto read = [&family] { return family.Collect().at(0).metric.at(0).counter.value; };
  EXPECT_EQ(read(), 5);
  value = 3;  // read from parts at different moments: it must not go down
  EXPECT_EQ(read(), 5);
  value = 9;
  EXPECT_EQ(read(), 9);
  EXPECT_THROW(family.addComputed({{"k", "v"}}, [] { return std::uint64_t{0}; }), std::logic_error);
  family.add({{"k", "w"}});
  EXPECT_THROW(family.addComputed({{"k", "w"}}, [] { return std::uint64_t{0}; }), std::logic_error);
  // Nor is a computed series handed out as a counter to add to.
  EXPECT_THROW(family.add({{"k", "v"}}), std::logic_error);
}

// calls{ok} is computed (histogram count - failures): under concurrent ok and
// failed calls, every scrape sees it monotonic, never more than the ok calls
// made so far, and the final figures exact; in-flight never goes negative.
TEST(RpcMetrics, ComputedOkCountUnderConcurrentCalls) {
  Metrics m;
  auto& handles = m.rpc().function(Side::kServer, "f");
  auto& errors = handles.failures(status::kError);
  constexpr int kThreads = 4, kCalls = 20000;
  std::atomic<int> running{kThreads};
  std::atomic<std::uint64_t> okMade{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        handles.started();
        if ((i + t) % 5 == 0) {
          handles.finishedNotOk(errors, 1000 + i);
        } else {
          okMade.fetch_add(1);  // before the call is timed: the bound below holds
          handles.finishedOk(1000 + i);
        }
      }
      running.fetch_sub(1);
    });
  }
  auto value = [](const std::vector<prometheus::MetricFamily>& families, const std::string& name,
                  const std::string& status) {
    for (const auto& f : families) {
      if (f.name != name) continue;
      for (const auto& metric : f.metric) {
        bool match = status.empty();
        for (const auto& l : metric.label) {
          if (l.name == "status" && l.value == status) match = true;
        }
        if (match) return name == names::kRpcInFlight ? metric.gauge.value : metric.counter.value;
      }
    }
    return -1.0;
  };
  double lastOk = 0;
  int scrapes = 0;
  while (running.load() > 0 || scrapes == 0) {
    const auto families = m.collect();
    const std::uint64_t okAfter = okMade.load();
    const double ok = value(families, names::kRpcCalls, "ok");
    EXPECT_GE(ok, lastOk);
    EXPECT_LE(ok, static_cast<double>(okAfter));
    EXPECT_GE(value(families, names::kRpcInFlight, ""), 0);
    lastOk = ok;
    ++scrapes;
  }
  for (auto& t : threads) t.join();
  const auto families = m.collect();
  EXPECT_EQ(value(families, names::kRpcCalls, "ok"), kThreads * kCalls * 4 / 5);
  EXPECT_EQ(value(families, names::kRpcCalls, "error"), kThreads * kCalls / 5);
  EXPECT_EQ(value(families, names::kRpcInFlight, ""), 0);
  EXPECT_THROW(handles.failures(status::kOk), std::invalid_argument);
}

// Counters of one label set are written by different threads: no two share a
// cache line.
TEST(AtomicCounter, EachOnACacheLineOfItsOwn) {
  Metrics m;
  auto& handles = m.channels().transport("uv", "w1");
  const AtomicCounter* counters[] = {handles.connections, handles.bytesSent, handles.bytesReceived,
                                     handles.errors};
  for (const AtomicCounter* a : counters) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
    for (const AtomicCounter* b : counters) {
      if (a != b) {
        EXPECT_NE(reinterpret_cast<std::uintptr_t>(a) / 64,
                  reinterpret_cast<std::uintptr_t>(b) / 64);
      }
    }
  }
}

TEST(Recording, RecorderListsParse) {
  unsigned mask = 99;
  ASSERT_TRUE(parseRecorders("observer", mask));
  EXPECT_EQ(mask, static_cast<unsigned>(Recorder::kObserver));
  ASSERT_TRUE(parseRecorders("transports,channels", mask));
  EXPECT_EQ(mask, static_cast<unsigned>(Recorder::kTransports) |
                      static_cast<unsigned>(Recorder::kChannels));
  ASSERT_TRUE(parseRecorders("all", mask));
  EXPECT_EQ(mask, kAllRecorders);
  ASSERT_TRUE(parseRecorders("none", mask));
  EXPECT_EQ(mask, 0u);
  mask = 99;
  for (const char* bad :
       {"", "observer,", ",observer", "observers", "observer,,channels", "none,observer"}) {
    EXPECT_FALSE(parseRecorders(bad, mask)) << bad;
    EXPECT_EQ(mask, 99u) << bad;  // untouched
  }
}

TEST(ChannelMetrics, HandlesAreCachedPerLabelSet) {
  Metrics m({true, {{"rpcjob_job", "j"}, {"worker", "w0"}}});
  TransferLabels labels{"cma", Direction::kSend, "w1", "cpu", "cpu"};
  auto& a = m.channels().transfer(labels);
  auto& b = m.channels().transfer(labels);
  EXPECT_EQ(&a, &b);
  labels.direction = Direction::kRecv;
  EXPECT_NE(&a, &m.channels().transfer(labels));
  a.recordSuccess(100, 1e-5);
  a.recordSuccess(28, 1e-5);
  a.recordError();
  const std::string out = text(m);
  const std::string series =
      "{rpcjob_job=\"j\",worker=\"w0\",channel=\"cma\",direction=\"send\",local_device=\"cpu\","
      "peer=\"w1\",remote_device=\"cpu\"}";
  EXPECT_TRUE(has(out, "rpcjob_channel_transfers_total" + series + " 2")) << out;
  EXPECT_TRUE(has(out, "rpcjob_channel_bytes_total" + series + " 128")) << out;
  EXPECT_TRUE(has(out, "rpcjob_channel_errors_total" + series + " 1")) << out;
  EXPECT_TRUE(has(out, "rpcjob_channel_transfer_duration_seconds_count" + series + " 2")) << out;
}

TEST(ChannelMetrics, PeerLabelOffBoundsCardinality) {
  Metrics m({false, {}});
  auto& a = m.channels().transfer({"basic", Direction::kSend, "w1", "cpu", "cpu"});
  auto& b = m.channels().transfer({"basic", Direction::kSend, "w2", "cpu", "cpu"});
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(&m.channels().transport("uv", "w1"), &m.channels().transport("uv", "w2"));
}

TEST(RpcMetrics, CallsInFlightAndLatency) {
  Metrics m;
  auto& rpc = m.rpc();
  rpc.callStarted("add", "w1");
  rpc.callStarted("add", "w1");
  rpc.serverCallStarted("add", "w1");
  rpc.callFinished("add", "w1", status::kOk, 2e-5);
  std::string out = text(m);
  EXPECT_TRUE(has(out, "rpcjob_rpc_in_flight{side=\"client\"} 1")) << out;
  EXPECT_TRUE(has(out, "rpcjob_rpc_in_flight{side=\"server\"} 1")) << out;
  EXPECT_TRUE(has(out, "rpcjob_rpc_calls_total{function=\"add\",side=\"client\",status=\"ok\"} 1"));
  EXPECT_TRUE(has(out, "rpcjob_rpc_duration_seconds_count{function=\"add\",side=\"client\"} 1"));
  rpc.callFinished("add", "w1", "cancelled", 1.0);
  rpc.serverCallFinished("add", "w1", status::kError, 1e-4);
  out = text(m);
  EXPECT_TRUE(has(out, "status=\"cancelled\"} 1"));
  EXPECT_TRUE(has(out, "rpcjob_rpc_in_flight{side=\"client\"} 0"));
  EXPECT_TRUE(
      has(out, "rpcjob_rpc_calls_total{function=\"add\",side=\"server\",status=\"error\"} 1"));
  // Cached handles are the same objects the string API uses.
  EXPECT_EQ(&rpc.function(Side::kClient, "add"), &rpc.function(Side::kClient, "add"));
  // The hot path: integer nanoseconds.
  auto& handles = rpc.function(Side::kServer, "add");
  handles.started();
  handles.finishedOk(30000);
  out = text(m);
  EXPECT_TRUE(has(out, "rpcjob_rpc_calls_total{function=\"add\",side=\"server\",status=\"ok\"} 1"))
      << out;
  EXPECT_TRUE(has(out, "rpcjob_rpc_in_flight{side=\"server\"} 0")) << out;
  EXPECT_TRUE(has(out,
                  "rpcjob_rpc_duration_seconds_bucket{function=\"add\",side=\"server\","
                  "le=\"5e-05\"} 1"))
      << out;
}

TEST(RpcMetrics, PipesSelectionAndInfo) {
  Metrics m;
  auto& rpc = m.rpc();
  rpc.pipeOpened("w1", 0.002);
  rpc.handshakeFailed("bad_proof");
  rpc.handshakeFailed("bad_proof");
  rpc.handshakeFailed("timeout");
  rpc.channelSelected("w1", "cuda:0", "cuda:1", "cuda_basic");
  rpc.channelSelected("w1", "cuda:0", "cuda:1", "cuda_ipc");
  rpc.setWorkerInfo({"worker0", 3, "resnet", "node-a"});
  const std::string out = text(m);
  EXPECT_TRUE(has(out, "rpcjob_pipe_handshakes_total{peer=\"w1\"} 1"));
  EXPECT_TRUE(has(out, "rpcjob_pipe_handshake_duration_seconds_count{peer=\"w1\"} 1"));
  EXPECT_TRUE(has(out, "rpcjob_rpc_handshake_failures_total{reason=\"bad_proof\"} 2")) << out;
  EXPECT_TRUE(has(out, "rpcjob_rpc_handshake_failures_total{reason=\"timeout\"} 1")) << out;
  EXPECT_TRUE(has(out,
                  "rpcjob_channel_selected{channel=\"cuda_basic\",local_device=\"cuda:0\","
                  "peer=\"w1\",remote_device=\"cuda:1\"} 0"))
      << out;
  EXPECT_TRUE(has(out,
                  "rpcjob_channel_selected{channel=\"cuda_ipc\",local_device=\"cuda:0\","
                  "peer=\"w1\",remote_device=\"cuda:1\"} 1"));
  EXPECT_TRUE(has(out,
                  "rpcjob_worker_info{node=\"node-a\",rank=\"3\",rpcjob_job=\"resnet\","
                  "worker=\"worker0\"} 1"))
      << out;
}

// Every metric in names.h is documented in metrics/README.md, and the
// exporter produces exactly these names.
TEST(Names, AllDocumentedAndExported) {
  std::ifstream file(RPCJOB_METRICS_README);
  ASSERT_TRUE(file) << RPCJOB_METRICS_README;
  std::stringstream readme;
  readme << file.rdbuf();
  Metrics m;
  m.rpc().setWorkerInfo({"w", 0, "j", "n"});
  // Families without a series are not exported: make one of each.
  m.channels().transfer({"basic", Direction::kSend, "p", "cpu", "cpu"});
  m.channels().transport("uv", "p");
  m.rpc().callStarted("f", "p");
  m.rpc().pipeOpened("p", 0.1);
  m.rpc().channelSelected("p", "cpu", "cpu", "basic");
  std::set<std::string> exported;
  for (const auto& family : m.collect()) exported.insert(family.name);
  for (const char* name :
       {names::kChannelTransfers, names::kChannelBytes, names::kChannelErrors,
        names::kChannelTransferDuration, names::kTransportConnections, names::kTransportBytes,
        names::kTransportErrors, names::kRpcCalls, names::kRpcDuration, names::kRpcInFlight,
        names::kPipeHandshakes, names::kPipeHandshakeDuration, names::kChannelSelected,
        names::kWorkerInfo}) {
    EXPECT_TRUE(has(readme.str(), std::string("`") + name + "`")) << name << " not in README";
    EXPECT_EQ(exported.count(name), 1u) << name << " not exported";
    EXPECT_EQ(std::string(name).rfind("rpcjob_", 0), 0u);
  }
  EXPECT_EQ(exported.size(), 14u);
}

}  // namespace
}  // namespace metrics
}  // namespace rpcjob
