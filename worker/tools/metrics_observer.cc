#include "metrics_observer.h"

#include <rpcjob/metrics/rpc_metrics.h>

namespace rpcjob::worker {
namespace {

double seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

const std::string& statusLabel(runtime::CallStatus status) {
  // Static strings: FunctionHandles::finished takes a std::string, and the
  // common statuses must not build one per call.
  static const std::string kOk = metrics::status::kOk, kError = metrics::status::kError,
                           kUnknown = "unknown_function", kTimeout = metrics::status::kTimeout,
                           kConnection = "connection", kOther = "other";
  switch (status) {
    case runtime::CallStatus::kOk:
      return kOk;
    case runtime::CallStatus::kRemoteError:
      return kError;
    case runtime::CallStatus::kUnknownFunction:
      return kUnknown;
    case runtime::CallStatus::kTimeout:
      return kTimeout;
    case runtime::CallStatus::kConnection:
      return kConnection;
    case runtime::CallStatus::kOther:
      break;
  }
  return kOther;
}

std::string deviceLabel(const std::string& device) {
  if (device == "cpu:0" || device == "cpu") return "cpu";
  return device;
}

MetricsObserver::MetricsObserver(metrics::RpcMetrics& rpc,
                                 const std::vector<std::string>& functions)
    : rpc_(rpc) {
  auto table = std::make_unique<Table>();
  for (const auto& f : functions) {
    table->emplace(f, Entry{&rpc_.function(metrics::Side::kClient, f),
                            &rpc_.function(metrics::Side::kServer, f)});
  }
  table_.store(table.get(), std::memory_order_release);
  tables_.push_back(std::move(table));
}

MetricsObserver::~MetricsObserver() = default;

const MetricsObserver::Entry& MetricsObserver::entry(const std::string& function) {
  const Table* table = table_.load(std::memory_order_acquire);
  auto it = table->find(function);
  if (it != table->end()) return it->second;
  return add(function);
}

const MetricsObserver::Entry& MetricsObserver::add(const std::string& function) {
  std::lock_guard<std::mutex> lock(mu_);
  const Table* current = table_.load(std::memory_order_acquire);
  auto it = current->find(function);
  if (it != current->end()) return it->second;
  // Copy-on-write: readers keep using the old snapshot, which stays alive (and
  // unchanged) until this object goes away; the FunctionHandles are RpcMetrics'.
  auto next = std::make_unique<Table>(*current);
  auto& added = next->emplace(function, Entry{&rpc_.function(metrics::Side::kClient, function),
                                              &rpc_.function(metrics::Side::kServer, function)})
                    .first->second;
  table_.store(next.get(), std::memory_order_release);
  tables_.push_back(std::move(next));
  return added;
}

void MetricsObserver::callStarted(const std::string& function, const std::string&) {
  entry(function).client->started();
}

void MetricsObserver::callFinished(const std::string& function, const std::string&,
                                   runtime::CallStatus status, std::chrono::nanoseconds duration) {
  entry(function).client->finished(statusLabel(status), seconds(duration));
}

void MetricsObserver::serverCallStarted(const std::string& function, const std::string&) {
  entry(function).server->started();
}

void MetricsObserver::serverCallFinished(const std::string& function, const std::string&,
                                         runtime::CallStatus status,
                                         std::chrono::nanoseconds duration) {
  entry(function).server->finished(statusLabel(status), seconds(duration));
}

void MetricsObserver::pipeOpened(const std::string& peer, std::chrono::nanoseconds handshake) {
  rpc_.pipeOpened(peer, seconds(handshake));
}

void MetricsObserver::channelSelected(const std::string& peer, const std::string& localDevice,
                                      const std::string& remoteDevice, const std::string& channel) {
  rpc_.channelSelected(peer, deviceLabel(localDevice), deviceLabel(remoteDevice), channel);
}

}  // namespace rpcjob::worker
