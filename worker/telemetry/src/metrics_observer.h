#pragma once
// The runtime's Observer (rpcjob/runtime/observer.h) forwarded to
// rpcjob::metrics::RpcMetrics. Lives in rpcjob_telemetry, not in the runtime
// library, so that prometheus stays out of the runtime's public headers.
//
// Hot path (per call and side): *Started finds the function's handles -- a
// per-thread one-entry cache compared by name, else a lock-free read of the
// current snapshot of the table (one atomic load and a hash lookup) -- counts
// the start and returns the handles and the start time in the CallToken;
// *Finished takes both back from the token (no lookup) and, for an ok call,
// adds to a histogram bucket and its sum (the histogram's count is the calls
// counter and the in-flight gauge's finished count, see rpc_metrics.h; the
// start and these adds go to the calling thread's own shard, thread_shard.h),
// and counts a failure otherwise. Times are the runtime's EventTimes
// (observer.h, on the TSC-backed event clock): a client call's start is the
// time its deadline was computed from, the calls that arrived in one message
// share one clock read, and a lane poller's turn reads no clock per served
// call (a frame's arrival is the counter read after the previous frame, and
// the turn's answers share one read when it publishes them).
// The first call of a function name takes a lock and publishes a new immutable
// snapshot. The set of names is bounded by the functions this worker calls and
// serves (the runtime reports served calls only for registered functions).

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rpcjob/runtime/observer.h"

namespace rpcjob::metrics {
class AtomicCounter;
class FunctionHandles;
class RpcMetrics;
}  // namespace rpcjob::metrics

namespace rpcjob::telemetry {

// The `status` label of a call status: ok, error, unknown_function, timeout,
// connection, other.
const std::string& statusLabel(runtime::CallStatus status);
// The runtime names devices "cpu:0", "cuda:1"; the channel metrics use "cpu",
// "cuda:1" (metrics/README.md). Maps the former to the latter.
std::string deviceLabel(const std::string& runtimeDevice);

class MetricsObserver : public runtime::Observer {
 public:
  // `rpc` must outlive this object. `functions`: names to cache up front (the
  // registered functions and the built-ins); others are added on first use.
  MetricsObserver(metrics::RpcMetrics& rpc, const std::vector<std::string>& functions = {});
  ~MetricsObserver() override;

  CallToken callStarted(const std::string& function, const std::string& peer,
                        const runtime::EventTime& now) override;
  void callFinished(const std::string& function, const std::string& peer,
                    runtime::CallStatus status, CallToken token,
                    const runtime::EventTime& now) override;
  CallToken serverCallStarted(const std::string& function, const std::string& peer,
                              const runtime::EventTime& arrived) override;
  void serverCallFinished(const std::string& function, const std::string& peer,
                          runtime::CallStatus status, CallToken token,
                          const runtime::EventTime& now) override;
  void pipeOpened(const std::string& peer, std::chrono::nanoseconds handshake) override;
  void handshakeFailed(const char* reason) override;
  void channelSelected(const std::string& peer, const std::string& localDevice,
                       const std::string& remoteDevice, const std::string& channel) override;

  // One side of one function: its handles and its failures counter per status
  // other than ok, resolved on first use of the status (so that no series
  // appears for a status that never happened).
  struct Side {
    static constexpr int kStatuses = 6;  // runtime::CallStatus
    metrics::FunctionHandles* handles = nullptr;
    std::atomic<metrics::AtomicCounter*> failureCounters[kStatuses] = {};  // by CallStatus
    metrics::AtomicCounter& failures(runtime::CallStatus status);          // status != kOk
  };
  struct Function {
    Side client;
    Side server;
  };

 private:
  using Table = std::unordered_map<std::string, Function*>;

  Function& function(const std::string& name);
  Function& add(const std::string& name);
  // function(name).*which, or null when it cannot be created (out of memory).
  Side* sideOf(const std::string& name, Side Function::*which) noexcept;
  // Both sides' call start and end; `which` picks the side of a Function.
  CallToken start(const std::string& function, Side Function::*which,
                  const runtime::EventTime& time);
  void end(const std::string& function, Side Function::*which, runtime::CallStatus status,
           CallToken token, const runtime::EventTime& now) noexcept;

  metrics::RpcMetrics& rpc_;
  const std::uint64_t id_;  // tells this observer's entries in the per-thread cache apart
  std::atomic<const Table*> table_;
  std::mutex mu_;                                     // writers of table_
  std::vector<std::unique_ptr<Table>> tables_;        // every snapshot, freed with this object
  std::vector<std::unique_ptr<Function>> functions_;  // stable addresses
};

}  // namespace rpcjob::telemetry
