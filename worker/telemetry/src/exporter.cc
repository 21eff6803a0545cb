#include "rpcjob/telemetry/exporter.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include <rpcjob/metrics/channel_metrics.h>
#include <rpcjob/metrics/http_server.h>
#include <rpcjob/metrics/metrics.h>
#include <rpcjob/metrics/names.h>
#include <rpcjob/metrics/rpc_metrics.h>

#include "metrics_observer.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/pair_links.h"
#if RPCJOB_HAS_INSTRUMENT
#include <rpcjob/instrument/instrument.h>
#endif
#if RPCJOB_HAS_INSTRUMENT && RPCJOB_WITH_CUDA
#include "cuda_event_timer.h"
#include "lane_transfer_meter.h"
#endif

namespace rpcjob::telemetry {
namespace {

int parsePort(const std::string& value, const char* what) {
  size_t used = 0;
  long port = -1;
  try {
    port = std::stol(value, &used);
  } catch (const std::exception&) {
  }
  if (used != value.size() || port < 0 || port > 65535) {
    throw std::invalid_argument(std::string(what) + ": not a port: '" + value + "'");
  }
  return static_cast<int>(port);
}

const WorkerEntry* entryOf(const Assignment& assignment, const std::string& worker) {
  for (const auto& w : assignment.workers) {
    if (w.name == worker) return &w;
  }
  return nullptr;
}

std::string envOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// SIGTERM/SIGINT -> signalLoop(), through a pipe: the handler only write()s
// (async-signal-safe), whichever thread the kernel picked for the signal. One
// Exporter at a time handles them (gSignalsTaken); it puts the handlers that
// were there back when it goes, so a later Exporter takes them over.
int gSignalPipe[2] = {-1, -1};
std::atomic<bool> gSignalsTaken{false};
struct sigaction gPreviousTerm {};
struct sigaction gPreviousInt {};

void onSignal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(gSignalPipe[1], &byte, 1);
  errno = saved;
}

std::string hostName() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "";
  return buffer;
}

}  // namespace

Settings settingsFromEnvironment(const Assignment& assignment, const std::string& worker,
                                 int portOverride) {
  Settings s;
  const WorkerEntry* self = entryOf(assignment, worker);
  if (portOverride >= 0) {
    s.port = portOverride;
  } else if (const char* env = std::getenv(kEnvMetricsPort); env != nullptr && *env != '\0') {
    s.port = parsePort(env, kEnvMetricsPort);
  } else if (self != nullptr) {
    s.port = self->metricsPort;
  }
  s.file = envOr(kEnvMetricsFile, "");
  std::string peer = envOr(kEnvMetricsPeerLabels, "1");
  if (peer != "0" && peer != "1") {
    throw std::invalid_argument(std::string(kEnvMetricsPeerLabels) + ": 0 or 1, not '" + peer +
                                "'");
  }
  s.peerLabel = peer == "1";
  return s;
}

std::unique_ptr<Exporter> fromEnvironment(const Identity& identity, int portOverride) {
  return std::make_unique<Exporter>(
      settingsFromEnvironment(identity.assignment, identity.name, portOverride),
      identity.assignment, identity.name);
}

std::unique_ptr<Exporter> fromEnvironment() {
  return fromEnvironment(identityFromEnvironment());
}

Exporter::Exporter(Settings settings, const Assignment& assignment, const std::string& worker)
    : settings_(std::move(settings)) {
  if (!settings_.enabled()) return;
  const WorkerEntry* self = entryOf(assignment, worker);
  std::string job = envOr(kEnvJobName, assignment.jobName.empty() ? "local" : assignment.jobName);
  metrics::MetricsOptions options;
  options.peerLabel = settings_.peerLabel;
  options.constantLabels = {{metrics::labels::kJob, job}, {metrics::labels::kWorker, worker}};
  metrics_ = std::make_unique<metrics::Metrics>(options);
  metrics::WorkerInfo info;
  info.worker = worker;
  info.rank = self != nullptr ? self->rank : -1;
  info.job = job;
  info.node = self != nullptr && !self->node.empty() ? self->node : hostName();
  metrics_->rpc().setWorkerInfo(info);
  // Device pairs seen from this worker: its derived map towards each peer, whose
  // inverse is the peer's towards us (the pairing its requests and our responses use).
  if (self != nullptr) {
    for (auto& [peer, pairs] : deviceMapsOf(assignment, worker)) {
      metrics_->channels().setDeviceMap(peer, std::move(pairs));
    }
  }
  if (!settings_.file.empty() && !gSignalsTaken.exchange(true)) {
    if (gSignalPipe[0] < 0 && pipe2(gSignalPipe, O_CLOEXEC) != 0) {
      gSignalsTaken = false;
      std::cerr << "rpcjob: metrics file: no pipe for SIGTERM handling; written at exit only\n";
      return;
    }
    // A handler, not a blocked mask and sigwait(): threads started before main
    // (libtorch's) would not have the signal blocked and would die of it.
    signalThread_ = std::thread([this] { signalLoop(); });
    struct sigaction action {};
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, &gPreviousTerm);
    sigaction(SIGINT, &action, &gPreviousInt);
  }
}

Exporter::~Exporter() {
  if (server_) server_->stop();
  writeFile();
  if (signalThread_.joinable()) {
    sigaction(SIGTERM, &gPreviousTerm, nullptr);
    sigaction(SIGINT, &gPreviousInt, nullptr);
    const unsigned char wake = 0;  // not a signal number: return
    [[maybe_unused]] ssize_t n = write(gSignalPipe[1], &wake, 1);
    signalThread_.join();
    gSignalsTaken = false;
  }
}

void Exporter::signalLoop() {
  for (;;) {
    unsigned char sig = 0;
    ssize_t n = read(gSignalPipe[0], &sig, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1 || sig == 0) return;  // woken at exit
    // Terminated: leave the final counts behind, then die of the signal as
    // before (its default action).
    writeFile();
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
}

void Exporter::attach(runtime::RuntimeOptions& options, const std::vector<std::string>& functions) {
  if (!metrics_) return;
#if RPCJOB_HAS_INSTRUMENT
  metrics::ChannelMetrics& channels = metrics_->channels();
#if RPCJOB_WITH_CUDA
  // CUDA channels complete when their copies are enqueued: time them with CUDA
  // events on the buffers' streams (one timer, one poller thread, for all).
  std::shared_ptr<instrument::TransferTimer> cudaTimer = runtime::cuda::makeCudaEventTimer();
  options.hooks.wrapChannel = [&channels, cudaTimer](
                                  const std::string& name,
                                  std::shared_ptr<tensorpipe::channel::Context> context) {
    const bool cuda = name.rfind("cuda_", 0) == 0;
    return instrument::instrumentChannel(name, std::move(context), channels,
                                         cuda ? cudaTimer : nullptr);
  };
  // CUDA tensors that no channel moves (a lane's IPC handles), timed the same way.
  options.hooks.deviceTransfers = makeLaneTransferMeter(channels, cudaTimer);
#else
  options.hooks.wrapChannel = [&channels](const std::string& name,
                                          std::shared_ptr<tensorpipe::channel::Context> context) {
    return instrument::instrumentChannel(name, std::move(context), channels);
  };
#endif
  options.hooks.wrapTransport = [&channels](
                                    const std::string& name,
                                    std::shared_ptr<tensorpipe::transport::Context> context) {
    return instrument::instrumentTransport(name, std::move(context), channels);
  };
#endif
  options.observer = std::make_shared<MetricsObserver>(metrics_->rpc(), functions);
}

void Exporter::serve() {
  if (!metrics_ || settings_.port <= 0) return;
  metrics::HttpServerOptions options;
  options.port = static_cast<std::uint16_t>(settings_.port);
  metrics::Metrics* m = metrics_.get();
  server_ = std::make_unique<metrics::HttpServer>(
      options, [m] { return m->collect(); }, [](std::string&) { return true; },
      [this](std::string& message) {
        if (ready_) return true;
        message = "runtime not initialized";
        return false;
      });
  server_->start();
}

int Exporter::port() const {
  return server_ ? server_->port() : 0;
}

void Exporter::writeFile() noexcept {
  if (!metrics_ || settings_.file.empty()) return;
  std::lock_guard<std::mutex> lock(fileMu_);
  try {
    std::string text = metrics::HttpServer::serialize(metrics_->collect());
    std::string tmp = settings_.file + ".tmp." + std::to_string(getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      out.flush();
      if (!out) throw std::runtime_error("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), settings_.file.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot rename " + tmp + " to " + settings_.file);
    }
  } catch (const std::exception& e) {
    std::cerr << "rpcjob: metrics file: " << e.what() << "\n";
  }
}

}  // namespace rpcjob::telemetry
