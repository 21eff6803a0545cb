#pragma once

// RPC-level metrics: calls by function and status, latency by function,
// in-flight calls (client and server side), pipe handshakes, the channel
// selected per peer and device pair, and the worker's info metric.
//
// The runtime reports through an observer interface of its own; a thin adapter
// forwards each observer call to the method of the same shape here. The string
// methods look the function's handles up (a map lookup under a lock, ~100 ns);
// a hot path instead keeps the FunctionHandles of a function (and the failures
// counter of a status) and uses finishedOk/finishedNotOk: two adds to the
// calling thread's own shard of the histogram (thread_shard.h), and a relaxed
// fetch_add for a failure; no lock, no lookup.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "rpcjob/metrics/atomic_metrics.h"

namespace prometheus {
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace rpcjob {
namespace metrics {

class Metrics;

enum class Side { kClient, kServer };
const char* toString(Side side);

// Call statuses used by the runtime. Any other string works too (it becomes a
// label value), but keep the set small: it multiplies the series.
namespace status {
inline constexpr char kOk[] = "ok";
inline constexpr char kError[] = "error";
inline constexpr char kTimeout[] = "timeout";
}  // namespace status

// The series of one (side, function). Thread safety: the methods are lock-free
// except failures() for a status other than error/timeout (one lookup).
//
// Every finished call is observed in the duration histogram, so the histogram
// already counts the calls: calls{status="ok"} is computed when collected, as
// the histogram's count minus the calls that ended otherwise, and the in-flight
// gauge subtracts the histogram's count from its starts. An ok call then costs
// two adds (a bucket and the sum, in the thread's shard), not four.
class FunctionHandles {
 public:
  FunctionHandles(Side side, std::string function, AtomicCounterFamily& calls,
                  InFlightGauge& inFlight, AtomicHistogram& duration);
  void started() const noexcept { inFlight_->started(); }
  void finished(const std::string& status, double seconds);
  // The hot path, in integer nanoseconds: a call that ended ok...
  void finishedOk(std::uint64_t nanos) const noexcept { duration_->observeNanos(nanos); }
  // ... or otherwise; `failures` is failures(status), kept by the caller.
  void finishedNotOk(AtomicCounter& failures, std::uint64_t nanos) const noexcept {
    failures.add(1);
    // Publishes the failure before the observation (the histogram's count()
    // loads acquire): a scrape that sees this call timed sees it failed, and
    // never counts it as ok.
    std::atomic_thread_fence(std::memory_order_release);
    duration_->observeNanos(nanos);
  }
  // The counter of this function's calls ending with `status`, which is not
  // ok; created on first use (error and timeout exist from the start, at 0).
  // Keep the reference.
  AtomicCounter& failures(const std::string& status);

 private:
  // What the computed ok series reads; shared with it (the family may outlive
  // these handles).
  struct Tally {
    const AtomicHistogram* duration;
    mutable std::mutex mutex;
    std::vector<const AtomicCounter*> failures;  // guarded by mutex
    std::uint64_t ok() const;
  };

  const Side side_;
  const std::string function_;
  AtomicCounterFamily& callsFamily_;
  InFlightGauge* inFlight_;
  AtomicHistogram* duration_;
  std::shared_ptr<Tally> tally_;
  AtomicCounter* error_ = nullptr;
  AtomicCounter* timeout_ = nullptr;
};

struct WorkerInfo {
  std::string worker;
  int rank = 0;
  std::string job;
  std::string node;
};

// Thread safety: all methods may be called from any thread.
class RpcMetrics {
 public:
  explicit RpcMetrics(Metrics& metrics);
  ~RpcMetrics();

  // Observer-shaped entry points. `peer` is accepted for the observer's shape
  // but not used as a label: function x status x peer would multiply series by
  // the world size; per-peer traffic is in the channel metrics.
  void callStarted(const std::string& function, const std::string& peer);
  void callFinished(const std::string& function, const std::string& peer, const std::string& status,
                    double seconds);
  void serverCallStarted(const std::string& function, const std::string& peer);
  void serverCallFinished(const std::string& function, const std::string& peer,
                          const std::string& status, double seconds);
  void pipeOpened(const std::string& peer, double handshakeSeconds);
  // A pipe closed because it failed authentication, by reason (never by peer:
  // an unauthenticated peer names itself).
  void handshakeFailed(const std::string& reason);
  // Sets rpcjob_channel_selected{peer, local_device, remote_device, channel} to
  // 1, and a channel previously selected for the same pair to 0.
  void channelSelected(const std::string& peer, const std::string& localDevice,
                       const std::string& remoteDevice, const std::string& channel);
  void setWorkerInfo(const WorkerInfo& info);

  // Cached handles of one function (for the runtime's registered functions).
  FunctionHandles& function(Side side, const std::string& function);

 private:
  Metrics& metrics_;
  AtomicCounterFamily& calls_;
  AtomicHistogramFamily& duration_;
  InFlightGauge* inFlight_[2];
  prometheus::Family<prometheus::Counter>& handshakes_;
  AtomicHistogramFamily& handshakeDuration_;
  prometheus::Family<prometheus::Counter>& handshakeFailures_;
  prometheus::Family<prometheus::Gauge>& selected_;
  prometheus::Family<prometheus::Gauge>& info_;

  std::mutex mutex_;
  std::map<std::pair<int, std::string>, std::unique_ptr<FunctionHandles>> functions_;
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Gauge*> selection_;
  prometheus::Gauge* infoGauge_ = nullptr;
};

}  // namespace metrics
}  // namespace rpcjob
