#include "rpcjob/metrics/channel_metrics.h"

#include "rpcjob/metrics/atomic_metrics.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/names.h"

namespace rpcjob {
namespace metrics {
namespace {

AtomicCounterFamily& counterFamily(Metrics& metrics, const char* name, const char* help) {
  return metrics.addCounterFamily(name, help);
}

}  // namespace

const char* toString(Direction direction) {
  return direction == Direction::kSend ? "send" : "recv";
}

void TransferHandles::recordSuccess(std::size_t length, double seconds) const noexcept {
  transfers->add(1);
  bytes->add(length);
  duration->observe(seconds);
}

void TransferHandles::recordSuccessNanos(std::size_t length, std::uint64_t nanos) const noexcept {
  transfers->add(1);
  bytes->add(length);
  duration->observeNanos(nanos);
}

void TransferHandles::recordError() const noexcept {
  errors->add(1);
}

ChannelMetrics::ChannelMetrics(Metrics& metrics)
    : metrics_(metrics),
      transfers_(counterFamily(metrics, names::kChannelTransfers,
                               "Tensor transfers completed by a TensorPipe channel")),
      bytes_(counterFamily(metrics, names::kChannelBytes,
                           "Bytes of tensors moved by a TensorPipe channel")),
      errors_(counterFamily(metrics, names::kChannelErrors,
                            "Tensor transfers of a TensorPipe channel that failed")),
      duration_(metrics.addHistogramFamily(
          names::kChannelTransferDuration,
          "Time from a channel's send/recv call to its completion callback",
          transferDurationBuckets())),
      transportConnections_(counterFamily(metrics, names::kTransportConnections,
                                          "Connections opened by a TensorPipe transport")),
      transportBytes_(counterFamily(metrics, names::kTransportBytes,
                                    "Bytes written or read by a TensorPipe transport")),
      transportErrors_(counterFamily(metrics, names::kTransportErrors,
                                     "Failed reads and writes of a TensorPipe transport")) {}

ChannelMetrics::~ChannelMetrics() = default;

TransferHandles& ChannelMetrics::transfer(const TransferLabels& in) {
  const std::string peer = metrics_.peerLabel(in.peer);
  TransferKey key{in.channel, static_cast<int>(in.direction), peer, in.localDevice,
                  in.remoteDevice};
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = transferHandles_[key];
  if (!slot) {
    const prometheus::Labels labels{{labels::kChannel, in.channel},
                                    {labels::kDirection, toString(in.direction)},
                                    {labels::kPeer, peer},
                                    {labels::kLocalDevice, in.localDevice},
                                    {labels::kRemoteDevice, in.remoteDevice}};
    slot = std::make_unique<TransferHandles>();
    slot->transfers = &transfers_.add(labels);
    slot->bytes = &bytes_.add(labels);
    slot->errors = &errors_.add(labels);
    slot->duration = &duration_.add(labels);
  }
  return *slot;
}

TransportHandles& ChannelMetrics::transport(const std::string& transport,
                                            const std::string& rawPeer) {
  const std::string peer = metrics_.peerLabel(rawPeer);
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = transportHandles_[{transport, peer}];
  if (!slot) {
    const prometheus::Labels labels{{labels::kTransport, transport}, {labels::kPeer, peer}};
    prometheus::Labels sent = labels;
    sent[labels::kDirection] = "send";
    prometheus::Labels received = labels;
    received[labels::kDirection] = "recv";
    slot = std::make_unique<TransportHandles>();
    slot->connections = &transportConnections_.add(labels);
    slot->bytesSent = &transportBytes_.add(sent);
    slot->bytesReceived = &transportBytes_.add(received);
    slot->errors = &transportErrors_.add(labels);
  }
  return *slot;
}

void ChannelMetrics::setDeviceMap(const std::string& peer,
                                  std::map<std::string, std::string> localToRemote) {
  std::lock_guard<std::mutex> lock(mutex_);
  deviceMaps_[peer] = std::move(localToRemote);
}

std::string ChannelMetrics::remoteDevice(const std::string& peer,
                                         const std::string& localDevice) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto mapIt = deviceMaps_.find(peer);
    if (mapIt != deviceMaps_.end()) {
      auto it = mapIt->second.find(localDevice);
      if (it != mapIt->second.end()) {
        return it->second;
      }
    }
  }
  if (localDevice == "cpu") {
    return "cpu";
  }
  return "unknown";
}

}  // namespace metrics
}  // namespace rpcjob
