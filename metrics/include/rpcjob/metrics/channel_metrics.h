#pragma once

// What TensorPipe's channels and transports move, per channel, direction, peer
// and device pair. The instrumented decorators (worker/instrument) are the
// writers; nothing here knows TensorPipe.
//
// Usage: a decorator asks once for the handles of a label set (transfer(),
// transport()) when it learns its labels, keeps the reference, and on every
// message calls the handle's lock-free record methods. Never look handles up per
// message.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace rpcjob {
namespace metrics {

class AtomicCounter;
class AtomicCounterFamily;
class AtomicHistogram;
class AtomicHistogramFamily;
class Metrics;

enum class Direction { kSend, kRecv };
const char* toString(Direction direction);

struct TransferLabels {
  std::string channel;  // the name the channel is registered under: "basic", "cma", "cuda_ipc"...
  Direction direction = Direction::kSend;
  std::string peer;          // the remote worker's name (dropped if the peer label is off)
  std::string localDevice;   // "cpu", "cuda:0"
  std::string remoteDevice;  // "cpu", "cuda:1", "unknown"
};

// The series of one TransferLabels. Thread safety: the record methods are
// lock-free (atomic counters) and may be called from any thread.
struct TransferHandles {
  AtomicCounter* transfers = nullptr;
  AtomicCounter* bytes = nullptr;
  AtomicCounter* errors = nullptr;
  AtomicHistogram* duration = nullptr;

  // A transfer completed: one transfer, `length` bytes, `seconds` from the
  // send/recv call to its completion.
  void recordSuccess(std::size_t length, double seconds) const noexcept;
  // The same with the duration in nanoseconds (the decorators' hot path: three
  // relaxed integer fetch_adds and a bucket search).
  void recordSuccessNanos(std::size_t length, std::uint64_t nanos) const noexcept;
  // A transfer failed: counted in errors only (not in transfers or bytes).
  void recordError() const noexcept;
};

// The series of one (transport, peer). Same thread safety as TransferHandles.
struct TransportHandles {
  AtomicCounter* connections = nullptr;
  AtomicCounter* bytesSent = nullptr;
  AtomicCounter* bytesReceived = nullptr;
  AtomicCounter* errors = nullptr;
};

// Thread safety: all methods may be called from any thread; transfer(),
// transport() and the device-map methods take a mutex.
class ChannelMetrics {
 public:
  explicit ChannelMetrics(Metrics& metrics);
  ~ChannelMetrics();

  // The handles of this label set, created on first use; the reference stays
  // valid as long as the Metrics lives.
  TransferHandles& transfer(const TransferLabels& labels);
  TransportHandles& transport(const std::string& transport, const std::string& peer);

  // Which local device pairs with which device of `peer`, from this worker's
  // side (e.g. {"cuda:0": "cuda:1"}), so that the decorators can label the
  // remote side of a transfer: a channel's send()/recv() sees only the local
  // buffer. The pairing holds both ways: a caller passes its device map, a
  // callee the inverse of its caller's map (the one its responses use).
  // Call it before the first transfer with `peer`: decorators resolve the
  // remote device once per channel and local device, then cache it.
  void setDeviceMap(const std::string& peer, std::map<std::string, std::string> localToRemote);
  // The remote device paired with `localDevice` for `peer`: from the device
  // map; else "cpu" for a CPU buffer; else "unknown".
  std::string remoteDevice(const std::string& peer, const std::string& localDevice) const;

 private:
  Metrics& metrics_;
  AtomicCounterFamily& transfers_;
  AtomicCounterFamily& bytes_;
  AtomicCounterFamily& errors_;
  AtomicHistogramFamily& duration_;
  AtomicCounterFamily& transportConnections_;
  AtomicCounterFamily& transportBytes_;
  AtomicCounterFamily& transportErrors_;

  mutable std::mutex mutex_;
  using TransferKey = std::tuple<std::string, int, std::string, std::string, std::string>;
  std::map<TransferKey, std::unique_ptr<TransferHandles>> transferHandles_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<TransportHandles>>
      transportHandles_;
  std::map<std::string, std::map<std::string, std::string>> deviceMaps_;
};

}  // namespace metrics
}  // namespace rpcjob
