#pragma once
// rpcjob-worker's metrics: settings from the environment and the assignment, the
// metrics::Metrics of the process, the TensorPipe decorators and the observer
// installed through RuntimeOptions, the /metrics, /healthz and /readyz endpoint,
// and the final metrics file (RPCJOB_METRICS_FILE) written at exit.
//
// Lifetime: construct before the Runtime and destroy after it (declare it first):
// the decorators and the observer record into the Metrics until the runtime's
// TensorPipe context is closed and joined. The destructor stops the endpoint and
// writes the final file.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rpcjob/assignment/assignment.h"
#include "rpcjob/runtime/options.h"

namespace rpcjob::metrics {
class HttpServer;
class Metrics;
}  // namespace rpcjob::metrics

namespace rpcjob::worker {

struct MetricsSettings {
  int port = 0;      // /metrics endpoint; 0: none
  std::string file;  // final metrics file; empty: none
  bool peerLabel = true;
  bool enabled() const { return port > 0 || !file.empty(); }
};

// The port: `flagPort` when >= 0 (--metrics-port), else RPCJOB_METRICS_PORT,
// else the assignment's metricsPort of `worker` (0: no endpoint); RPCJOB_METRICS_FILE;
// RPCJOB_METRICS_PEER_LABELS=0 turns the peer label off. Throws
// std::invalid_argument on a malformed value.
MetricsSettings metricsSettings(const Assignment& assignment, const std::string& worker,
                                int flagPort);

class WorkerMetrics {
 public:
  // Creates the Metrics (constant labels rpcjob_job and worker), sets the info
  // metric and the device maps. With a metrics file, SIGTERM and SIGINT are
  // handled (a handler writes to a pipe, a thread of ours reads it): the file is
  // written, then the signal's default action runs.
  WorkerMetrics(MetricsSettings settings, const Assignment& assignment, const std::string& worker);
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // Decorates every channel and transport (RuntimeOptions::hooks) and installs
  // the RPC observer. `functions`: names whose handles are made up front.
  void install(runtime::RuntimeOptions& options, const std::vector<std::string>& functions);
  // Serves /metrics, /healthz, /readyz when a port is set. Throws
  // std::system_error when the port cannot be bound.
  void serve();
  // /readyz answers 200 from now on (the runtime is initialized).
  void setReady() { ready_ = true; }
  // Writes the metrics file (write-then-rename), when one is set. Thread-safe.
  void writeFile() noexcept;
  int port() const;

 private:
  void signalLoop();

  const MetricsSettings settings_;
  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<metrics::HttpServer> server_;
  std::atomic<bool> ready_{false};
  std::mutex fileMu_;
  std::thread signalThread_;
};

}  // namespace rpcjob::worker
