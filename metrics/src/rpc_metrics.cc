#include "rpcjob/metrics/rpc_metrics.h"

#include <algorithm>
#include <stdexcept>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "rpcjob/metrics/atomic_metrics.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/names.h"

namespace rpcjob {
namespace metrics {

const char* toString(Side side) {
  return side == Side::kClient ? "client" : "server";
}

FunctionHandles::FunctionHandles(Side side, std::string function, AtomicCounterFamily& calls,
                                 InFlightGauge& inFlight, AtomicHistogram& duration)
    : side_(side),
      function_(std::move(function)),
      callsFamily_(calls),
      inFlight_(&inFlight),
      duration_(&duration),
      tally_(std::make_shared<Tally>()) {
  tally_->duration = duration_;
  calls.addComputed({{labels::kSide, toString(side)},
                     {labels::kFunction, function_},
                     {labels::kStatus, status::kOk}},
                    [tally = tally_] { return tally->ok(); });
  error_ = &failures(status::kError);
  timeout_ = &failures(status::kTimeout);
  inFlight.countFinishedIn(duration);
}

std::uint64_t FunctionHandles::Tally::ok() const {
  // The histogram first: every failure it counts was published before it.
  const std::uint64_t timed = duration->count();
  std::uint64_t failed = 0;
  std::lock_guard<std::mutex> lock(mutex);
  for (const AtomicCounter* counter : failures) {
    failed += counter->value();
  }
  return timed > failed ? timed - failed : 0;
}

void FunctionHandles::finished(const std::string& callStatus, double seconds) {
  const std::uint64_t nanos = AtomicHistogram::toNanos(seconds);
  if (callStatus == status::kOk) {
    finishedOk(nanos);
  } else {
    finishedNotOk(failures(callStatus), nanos);
  }
}

AtomicCounter& FunctionHandles::failures(const std::string& callStatus) {
  if (callStatus == status::kOk) {
    throw std::invalid_argument("FunctionHandles::failures: ok calls are counted by the histogram");
  }
  if (callStatus == status::kError && error_ != nullptr) {
    return *error_;
  }
  if (callStatus == status::kTimeout && timeout_ != nullptr) {
    return *timeout_;
  }
  AtomicCounter& counter = callsFamily_.add({{labels::kSide, toString(side_)},
                                             {labels::kFunction, function_},
                                             {labels::kStatus, callStatus}});
  std::lock_guard<std::mutex> lock(tally_->mutex);
  if (std::find(tally_->failures.begin(), tally_->failures.end(), &counter) ==
      tally_->failures.end()) {
    tally_->failures.push_back(&counter);
  }
  return counter;
}

RpcMetrics::RpcMetrics(Metrics& metrics)
    : metrics_(metrics),
      calls_(metrics.addCounterFamily(
          names::kRpcCalls, "RPC calls completed, by side (client/server), function and status")),
      duration_(metrics.addHistogramFamily(
          names::kRpcDuration,
          "RPC latency by side and function: client from call to response, server from "
          "request to response sent",
          rpcDurationBuckets(), thread_shard::kShards)),
      handshakes_(prometheus::BuildCounter()
                      .Name(names::kPipeHandshakes)
                      .Help("TensorPipe pipes established, by peer")
                      .Labels(metrics.options().constantLabels)
                      .Register(metrics.registry())),
      handshakeDuration_(metrics.addHistogramFamily(
          names::kPipeHandshakeDuration, "Time to establish a pipe to a peer (handshake)",
          transferDurationBuckets())),
      handshakeFailures_(prometheus::BuildCounter()
                             .Name(names::kHandshakeFailures)
                             .Help("Pipes closed because their authentication handshake failed, "
                                   "by reason")
                             .Labels(metrics.options().constantLabels)
                             .Register(metrics.registry())),
      selected_(prometheus::BuildGauge()
                    .Name(names::kChannelSelected)
                    .Help("1 for the channel TensorPipe selected for a peer and device pair")
                    .Labels(metrics.options().constantLabels)
                    .Register(metrics.registry())),
      // No constant labels here: the info metric carries worker and job itself.
      info_(prometheus::BuildGauge()
                .Name(names::kWorkerInfo)
                .Help("1, labelled with this worker's identity")
                .Register(metrics.registry())) {
  auto& inFlight = metrics.addInFlightFamily(names::kRpcInFlight,
                                             "RPC calls in flight, by side (client/server)");
  inFlight_[0] = &inFlight.add({{labels::kSide, toString(Side::kClient)}});
  inFlight_[1] = &inFlight.add({{labels::kSide, toString(Side::kServer)}});
}

RpcMetrics::~RpcMetrics() = default;

FunctionHandles& RpcMetrics::function(Side side, const std::string& function) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = functions_[{static_cast<int>(side), function}];
  if (!slot) {
    auto& duration =
        duration_.add({{labels::kSide, toString(side)}, {labels::kFunction, function}});
    slot = std::make_unique<FunctionHandles>(side, function, calls_,
                                             *inFlight_[static_cast<int>(side)], duration);
  }
  return *slot;
}

void RpcMetrics::callStarted(const std::string& fn, const std::string& /*peer*/) {
  function(Side::kClient, fn).started();
}

void RpcMetrics::callFinished(const std::string& fn, const std::string& /*peer*/,
                              const std::string& callStatus, double seconds) {
  function(Side::kClient, fn).finished(callStatus, seconds);
}

void RpcMetrics::serverCallStarted(const std::string& fn, const std::string& /*peer*/) {
  function(Side::kServer, fn).started();
}

void RpcMetrics::serverCallFinished(const std::string& fn, const std::string& /*peer*/,
                                    const std::string& callStatus, double seconds) {
  function(Side::kServer, fn).finished(callStatus, seconds);
}

void RpcMetrics::pipeOpened(const std::string& peer, double handshakeSeconds) {
  const std::string label = metrics_.peerLabel(peer);
  handshakes_.Add({{labels::kPeer, label}}).Increment();
  handshakeDuration_.add({{labels::kPeer, label}}).observe(handshakeSeconds);
}

void RpcMetrics::handshakeFailed(const std::string& reason) {
  handshakeFailures_.Add({{"reason", reason}}).Increment();
}

void RpcMetrics::channelSelected(const std::string& peer, const std::string& localDevice,
                                 const std::string& remoteDevice, const std::string& channel) {
  const std::string label = metrics_.peerLabel(peer);
  auto& gauge = selected_.Add({{labels::kPeer, label},
                               {labels::kLocalDevice, localDevice},
                               {labels::kRemoteDevice, remoteDevice},
                               {labels::kChannel, channel}});
  gauge.Set(1);
  if (!metrics_.options().peerLabel) {
    // Without the peer label a series stands for "some peer uses this channel
    // for this device pair"; another peer's choice does not unset it.
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto& previous = selection_[{label, localDevice, remoteDevice}];
  if (previous != nullptr && previous != &gauge) {
    previous->Set(0);
  }
  previous = &gauge;
}

void RpcMetrics::setWorkerInfo(const WorkerInfo& info) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (infoGauge_ != nullptr) {
    info_.Remove(infoGauge_);
  }
  infoGauge_ = &info_.Add({{labels::kWorker, info.worker},
                           {labels::kRank, std::to_string(info.rank)},
                           {labels::kJob, info.job},
                           {labels::kNode, info.node}});
  infoGauge_->Set(1);
}

}  // namespace metrics
}  // namespace rpcjob
