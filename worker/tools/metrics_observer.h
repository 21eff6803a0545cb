#pragma once
// The runtime's Observer (rpcjob/runtime/observer.h) forwarded to
// rpcjob::metrics::RpcMetrics. Lives with rpcjob-worker, not in the runtime
// library, so that prometheus stays out of the runtime's public headers.
//
// Per-function handles are cached: the first call of a function name takes a
// lock and publishes a new immutable snapshot of the table; every later call
// finds its handles with a lock-free read of the current snapshot (one atomic
// load and a hash lookup of the name the observer is handed). The set of names
// is bounded by the functions this worker calls and serves (the runtime reports
// served calls only for registered functions).

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rpcjob/runtime/observer.h"

namespace rpcjob::metrics {
class FunctionHandles;
class RpcMetrics;
}  // namespace rpcjob::metrics

namespace rpcjob::worker {

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

  void callStarted(const std::string& function, const std::string& peer) override;
  void callFinished(const std::string& function, const std::string& peer,
                    runtime::CallStatus status, std::chrono::nanoseconds duration) override;
  void serverCallStarted(const std::string& function, const std::string& peer) override;
  void serverCallFinished(const std::string& function, const std::string& peer,
                          runtime::CallStatus status, std::chrono::nanoseconds duration) override;
  void pipeOpened(const std::string& peer, std::chrono::nanoseconds handshake) override;
  void channelSelected(const std::string& peer, const std::string& localDevice,
                       const std::string& remoteDevice, const std::string& channel) override;

 private:
  struct Entry {
    metrics::FunctionHandles* client;
    metrics::FunctionHandles* server;
  };
  using Table = std::unordered_map<std::string, Entry>;

  const Entry& entry(const std::string& function);
  const Entry& add(const std::string& function);

  metrics::RpcMetrics& rpc_;
  std::atomic<const Table*> table_;
  std::mutex mu_;                               // writers of table_
  std::vector<std::unique_ptr<Table>> tables_;  // every snapshot, freed with this object
};

}  // namespace rpcjob::worker
