#pragma once
// rpcjob's metrics for a program of your own, exactly as rpcjob-worker exports
// them: per-channel bytes and transfers (the TensorPipe decorators), per-function
// RPC calls and latency (the runtime's observer), served on /metrics (with
// /healthz and /readyz) and written to the final metrics file at exit, which
// `rpcjob run` reads for its per-channel summary. The settings come from the
// environment `rpcjob run` and the operator give every worker (worker/README.md,
// "Metrics"); with neither a port nor a file set, the exporter does nothing.
//
//   rpcjob::Identity identity = rpcjob::identityFromEnvironment();
//   auto options = rpcjob::runtime::optionsFromAssignment(identity.assignment, identity.name);
//   rpcjob::runtime::applyEnvironment(options);
//   auto metrics = rpcjob::telemetry::fromEnvironment(identity);  // 1. before the Runtime
//   metrics->attach(options);                                     // 2. decorators + observer
//   auto rt = std::make_unique<rpcjob::runtime::Runtime>(
//       std::move(identity.assignment), identity.name, std::move(options));
//   metrics->serve();                                             // 3. /metrics, /healthz
//   rt->start();
//   metrics->setReady();                                          // 4. /readyz answers 200
//   ...
//   rt->shutdown();
//   rt.reset();                                                   // 5. the Runtime goes first
//   // `metrics` destroyed last: stops serving and writes the metrics file
//
// Lifetime: the Exporter must outlive the Runtime built from the options it was
// attached to (declare it first): the decorators and the observer record into it
// until the runtime's TensorPipe context is closed and joined. Create it before
// starting threads of your own: with a metrics file it handles SIGTERM and
// SIGINT (the file is written, then the signal's default action runs); one
// Exporter at a time does, and puts the previous handlers back when it goes.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rpcjob/assignment/assignment.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/runtime/options.h"

namespace rpcjob::metrics {
class HttpServer;
class Metrics;
}  // namespace rpcjob::metrics

namespace rpcjob::telemetry {

struct Settings {
  int port = 0;      // /metrics endpoint; 0: none
  std::string file;  // final metrics file; empty: none
  bool peerLabel = true;
  bool enabled() const { return port > 0 || !file.empty(); }
};

// The port: `portOverride` when >= 0 (rpcjob-worker's --metrics-port), else
// RPCJOB_METRICS_PORT, else the assignment's metricsPort of `worker` (0: no
// endpoint); RPCJOB_METRICS_FILE; RPCJOB_METRICS_PEER_LABELS=0 turns the peer
// label off. Throws std::invalid_argument on a malformed value.
Settings settingsFromEnvironment(const Assignment& assignment, const std::string& worker,
                                 int portOverride = -1);

class Exporter {
 public:
  // Enabled settings: creates the metrics (constant labels rpcjob_job and
  // worker), sets the info metric and the device maps, and with a metrics file
  // handles SIGTERM and SIGINT (a handler writes to a pipe, a thread of ours
  // reads it). Disabled: every method below does nothing.
  Exporter(Settings settings, const Assignment& assignment, const std::string& worker);
  ~Exporter();  // stops serving, writes the metrics file
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  bool enabled() const { return settings_.enabled(); }
  // Decorates every channel and transport (RuntimeOptions::hooks; replaces hooks
  // already set) and installs the RPC observer. `functions`: names whose
  // series are made up front; others appear on first use.
  void attach(runtime::RuntimeOptions& options, const std::vector<std::string>& functions = {});
  // Serves /metrics, /healthz, /readyz when a port is set. Throws
  // std::system_error when the port cannot be bound.
  void serve();
  // /readyz answers 200 from now on (the runtime is started).
  void setReady() { ready_ = true; }
  // Writes the metrics file (write-then-rename), when one is set. Thread-safe;
  // errors go to stderr.
  void writeFile() noexcept;
  // The port served on (0: none).
  int port() const;

 private:
  void signalLoop();

  const Settings settings_;
  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<metrics::HttpServer> server_;
  std::atomic<bool> ready_{false};
  std::mutex fileMu_;
  std::thread signalThread_;
};

// settingsFromEnvironment() for `identity`, and the Exporter of them (disabled
// when neither a port nor a file is set). Throws std::invalid_argument on a
// malformed setting.
std::unique_ptr<Exporter> fromEnvironment(const Identity& identity, int portOverride = -1);
// The same for identityFromEnvironment() (which throws AssignmentError without
// an identity), for a program that builds its Runtime from the identity too.
std::unique_ptr<Exporter> fromEnvironment();

}  // namespace rpcjob::telemetry
