#pragma once

// RPC-level metrics: calls by function and status, latency by function,
// in-flight calls (client and server side), pipe handshakes, the channel
// selected per peer and device pair, and the worker's info metric.
//
// The runtime reports through an observer interface of its own; a thin adapter
// forwards each observer call to the method of the same shape here. The string
// methods look the function's handles up (a map lookup under a lock, ~100 ns);
// a hot path can instead keep the FunctionHandles of a registered function and
// use the handle overloads, which are lock-free.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace prometheus {
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace rpcjob {
namespace metrics {

class AtomicHistogram;
class AtomicHistogramFamily;
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

// The series of one (side, function). Thread safety: methods are lock-free
// except calls() for a status other than ok/error/timeout (one lookup).
class FunctionHandles {
 public:
  FunctionHandles(Side side, std::string function, prometheus::Family<prometheus::Counter>& calls,
                  prometheus::Gauge& inFlight, AtomicHistogram& duration);
  void started() const noexcept;
  void finished(const std::string& status, double seconds);

 private:
  prometheus::Counter& calls(const std::string& status);
  const Side side_;
  const std::string function_;
  prometheus::Family<prometheus::Counter>& callsFamily_;
  prometheus::Gauge* inFlight_;
  AtomicHistogram* duration_;
  prometheus::Counter* ok_;
  prometheus::Counter* error_;
  prometheus::Counter* timeout_;
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
  // Sets rpcjob_channel_selected{peer, local_device, remote_device, channel} to
  // 1, and a channel previously selected for the same pair to 0.
  void channelSelected(const std::string& peer, const std::string& localDevice,
                       const std::string& remoteDevice, const std::string& channel);
  void setWorkerInfo(const WorkerInfo& info);

  // Cached handles of one function (for the runtime's registered functions).
  FunctionHandles& function(Side side, const std::string& function);

 private:
  Metrics& metrics_;
  prometheus::Family<prometheus::Counter>& calls_;
  AtomicHistogramFamily& duration_;
  prometheus::Gauge* inFlight_[2];
  prometheus::Family<prometheus::Counter>& handshakes_;
  AtomicHistogramFamily& handshakeDuration_;
  prometheus::Family<prometheus::Gauge>& selected_;
  prometheus::Family<prometheus::Gauge>& info_;

  std::mutex mutex_;
  std::map<std::pair<int, std::string>, std::unique_ptr<FunctionHandles>> functions_;
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Gauge*> selection_;
  prometheus::Gauge* infoGauge_ = nullptr;
};

}  // namespace metrics
}  // namespace rpcjob
