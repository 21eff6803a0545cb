#include "metrics_observer.h"

#include <cstring>

#include <rpcjob/metrics/recording.h>
#include <rpcjob/metrics/rpc_metrics.h>

namespace rpcjob::telemetry {
namespace {

double seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}

std::atomic<std::uint64_t> gNextObserverId{1};

// The handle of a call that started while recording was paused: its end is not
// recorded either (the in-flight gauge stays balanced).
const char kNotRecorded = 0;

// The last function this thread looked up (a caller thread calls the same
// function again and again; so does a loop thread serving it). Trivially
// constructible, so that a thread_local costs no guard; names longer than
// kMaxName always take the table.
struct LastLookup {
  static constexpr std::size_t kMaxName = 48;
  std::uint64_t observer = 0;
  MetricsObserver::Function* function = nullptr;
  std::size_t size = 0;
  char name[kMaxName];
};
thread_local LastLookup tLast;

}  // namespace

const std::string& statusLabel(runtime::CallStatus status) {
  // Static strings: FunctionHandles::failures takes a std::string, and the
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

metrics::AtomicCounter& MetricsObserver::Side::failures(runtime::CallStatus status) {
  auto index = static_cast<unsigned>(status);
  if (index >= kStatuses) index = static_cast<unsigned>(runtime::CallStatus::kOther);
  auto& slot = failureCounters[index];
  if (auto* counter = slot.load(std::memory_order_acquire)) return *counter;
  // First call with this status: a lookup under the family's lock. Racing
  // threads get the same counter.
  auto* counter = &handles->failures(statusLabel(status));
  slot.store(counter, std::memory_order_release);
  return *counter;
}

MetricsObserver::MetricsObserver(metrics::RpcMetrics& rpc,
                                 const std::vector<std::string>& functions)
    : rpc_(rpc), id_(gNextObserverId.fetch_add(1)) {
  auto table = std::make_unique<Table>();
  for (const auto& f : functions) {
    if (table->count(f)) continue;
    auto entry = std::make_unique<Function>();
    entry->client.handles = &rpc_.function(metrics::Side::kClient, f);
    entry->server.handles = &rpc_.function(metrics::Side::kServer, f);
    table->emplace(f, entry.get());
    functions_.push_back(std::move(entry));
  }
  table_.store(table.get(), std::memory_order_release);
  tables_.push_back(std::move(table));
}

MetricsObserver::~MetricsObserver() = default;

MetricsObserver::Function& MetricsObserver::function(const std::string& name) {
  LastLookup& last = tLast;
  if (last.observer == id_ && last.size == name.size() &&
      std::memcmp(last.name, name.data(), name.size()) == 0) {
    return *last.function;
  }
  const Table* table = table_.load(std::memory_order_acquire);
  auto it = table->find(name);
  Function& found = it != table->end() ? *it->second : add(name);
  if (name.size() <= LastLookup::kMaxName) {
    last.observer = id_;
    last.function = &found;
    last.size = name.size();
    std::memcpy(last.name, name.data(), name.size());
  }
  return found;
}

MetricsObserver::Function& MetricsObserver::add(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const Table* current = table_.load(std::memory_order_acquire);
  auto it = current->find(name);
  if (it != current->end()) return *it->second;
  // Copy-on-write: readers keep using the old snapshot, which stays alive (and
  // unchanged) until this object goes away; the FunctionHandles are RpcMetrics'.
  auto entry = std::make_unique<Function>();
  entry->client.handles = &rpc_.function(metrics::Side::kClient, name);
  entry->server.handles = &rpc_.function(metrics::Side::kServer, name);
  auto next = std::make_unique<Table>(*current);
  next->emplace(name, entry.get());
  table_.store(next.get(), std::memory_order_release);
  tables_.push_back(std::move(next));
  functions_.push_back(std::move(entry));
  return *functions_.back();
}

namespace {

// Steady-clock nanoseconds since its epoch (a CallToken's start).
std::uint64_t ticks(const runtime::EventTime& time) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(time.get().time_since_epoch()).count());
}

}  // namespace

MetricsObserver::Side* MetricsObserver::sideOf(const std::string& name,
                                               Side Function::*which) noexcept {
  try {
    return &(function(name).*which);
  } catch (...) {
    // A new function name adds a table entry and its series, which allocates:
    // out of memory, the call goes unrecorded rather than failing (a caller's
    // rpcAsync) or taking down the loop thread (a served call).
    return nullptr;
  }
}

runtime::Observer::CallToken MetricsObserver::start(const std::string& function,
                                                    Side Function::*which,
                                                    const runtime::EventTime& time) {
  if (!metrics::recording(metrics::Recorder::kObserver)) return {&kNotRecorded, 0};
  Side* side = sideOf(function, which);
  if (side == nullptr) return {&kNotRecorded, 0};
  side->handles->started();
  return {side, ticks(time)};
}

void MetricsObserver::end(const std::string& function, Side Function::*which,
                          runtime::CallStatus status, CallToken token,
                          const runtime::EventTime& now) noexcept {
  if (token.handle == &kNotRecorded) return;
  auto* side = static_cast<Side*>(const_cast<void*>(token.handle));
  if (side == nullptr) side = sideOf(function, which);
  if (side == nullptr) return;
  const std::uint64_t endTicks = ticks(now);
  const std::uint64_t nanos = endTicks > token.start ? endTicks - token.start : 0;
  if (status == runtime::CallStatus::kOk) {
    side->handles->finishedOk(nanos);
    return;
  }
  try {
    side->handles->finishedNotOk(side->failures(status), nanos);
  } catch (...) {
    // The first call of a status creates its series, which allocates. Metrics
    // must not take the worker down: out of memory, the call goes unrecorded
    // (and stays counted in flight).
  }
}

runtime::Observer::CallToken MetricsObserver::callStarted(const std::string& function,
                                                          const std::string&,
                                                          const runtime::EventTime& now) {
  return start(function, &Function::client, now);
}

void MetricsObserver::callFinished(const std::string& function, const std::string&,
                                   runtime::CallStatus status, CallToken token,
                                   const runtime::EventTime& now) {
  end(function, &Function::client, status, token, now);
}

runtime::Observer::CallToken MetricsObserver::serverCallStarted(const std::string& function,
                                                                const std::string&,
                                                                const runtime::EventTime& arrived) {
  return start(function, &Function::server, arrived);
}

void MetricsObserver::serverCallFinished(const std::string& function, const std::string&,
                                         runtime::CallStatus status, CallToken token,
                                         const runtime::EventTime& now) {
  end(function, &Function::server, status, token, now);
}

// Not paused with the recorder: a security signal, not a performance figure.
void MetricsObserver::handshakeFailed(const char* reason) {
  rpc_.handshakeFailed(reason);
}

void MetricsObserver::pipeOpened(const std::string& peer, std::chrono::nanoseconds handshake) {
  rpc_.pipeOpened(peer, seconds(handshake));
}

void MetricsObserver::channelSelected(const std::string& peer, const std::string& localDevice,
                                      const std::string& remoteDevice, const std::string& channel) {
  rpc_.channelSelected(peer, deviceLabel(localDevice), deviceLabel(remoteDevice), channel);
}

}  // namespace rpcjob::telemetry
