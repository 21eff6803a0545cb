// The channel decorator: InstrumentedChannelContext / InstrumentedChannel.

#include <atomic>
#include <deque>
#include <mutex>
#include <utility>

#include <tensorpipe/channel/channel.h>

#include "context_id.h"
#include "rpcjob/instrument/instrument.h"
#include "rpcjob/metrics/channel_metrics.h"
#include "rpcjob/metrics/recording.h"
#include "rpcjob/metrics/tick_clock.h"

namespace rpcjob {
namespace instrument {

using metrics::Direction;
using metrics::TransferHandles;
namespace tick_clock = metrics::tick_clock;

void TransferReport::operator()(double seconds) const noexcept {
  handles->recordSuccess(length, seconds);
}

namespace {

std::string deviceLabel(const tensorpipe::Device& device) {
  return device.type == tensorpipe::kCpuDeviceType ? std::string("cpu") : device.toString();
}

// What a context shares with its channels.
struct Shared {
  Shared(std::string n, metrics::ChannelMetrics& m, std::shared_ptr<TransferTimer> t)
      : name(std::move(n)),
        metrics(m),
        timer(std::move(t)),
        nanosPerTick(tick_clock::nanosPerTick()) {}
  const std::string name;
  metrics::ChannelMetrics& metrics;
  const std::shared_ptr<TransferTimer> timer;
  const double nanosPerTick;
  ContextId contextId;
};

class InstrumentedChannel final : public tensorpipe::channel::Channel {
 public:
  InstrumentedChannel(std::shared_ptr<Shared> shared,
                      std::shared_ptr<tensorpipe::channel::Channel> inner)
      : shared_(std::move(shared)), inner_(std::move(inner)) {}

  void send(tensorpipe::Buffer buffer, size_t length,
            tensorpipe::channel::TSendCallback callback) override {
    if (!metrics::recording(metrics::Recorder::kChannels)) {
      inner_->send(std::move(buffer), length, std::move(callback));
      return;
    }
    const TransferHandles* handles = handlesFor(Direction::kSend, buffer.device());
    auto wrapped = complete(handles, length, buffer, std::move(callback));
    inner_->send(std::move(buffer), length, std::move(wrapped));
  }

  void recv(tensorpipe::Buffer buffer, size_t length,
            tensorpipe::channel::TRecvCallback callback) override {
    if (!metrics::recording(metrics::Recorder::kChannels)) {
      inner_->recv(std::move(buffer), length, std::move(callback));
      return;
    }
    const TransferHandles* handles = handlesFor(Direction::kRecv, buffer.device());
    auto wrapped = complete(handles, length, buffer, std::move(callback));
    inner_->recv(std::move(buffer), length, std::move(wrapped));
  }

  void setId(std::string id) override {
    std::string peer = shared_->contextId.peerOf(id);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      peer_ = std::move(peer);
      ++generation_;
      for (auto& last : last_) {
        last.store(nullptr, std::memory_order_release);
      }
    }
    inner_->setId(std::move(id));
  }

  void close() override { inner_->close(); }

 private:
  // One (direction, local device) resolved to its handles, for one peer.
  struct Slot {
    Direction direction;
    tensorpipe::Device device;
    std::uint64_t generation;
    const TransferHandles* handles;
  };

  // Wraps the caller's callback: records the transfer, then calls it. Called
  // before the buffer is moved to the inner channel (the timer reads it).
  template <typename Callback>
  Callback complete(const TransferHandles* handles, size_t length, const tensorpipe::Buffer& buffer,
                    Callback callback) {
    if (const auto& timer = shared_->timer) {
      const std::uint64_t token = timer->begin(buffer);
      return [handles, length, token, timer,
              callback{std::move(callback)}](const tensorpipe::Error& error) {
        if (error) {
          handles->recordError();
        } else {
          timer->end(token, TransferReport{handles, length});
        }
        callback(error);
      };
    }
    const std::uint64_t start = tick_clock::now();
    return [handles, length, start, perTick{shared_->nanosPerTick},
            callback{std::move(callback)}](const tensorpipe::Error& error) {
      if (error) {
        handles->recordError();
      } else {
        handles->recordSuccessNanos(length, tick_clock::nanos(start, tick_clock::now(), perTick));
      }
      callback(error);
    };
  }

  // Hot path: one atomic load and a Device comparison. The slow path (first
  // transfer of a direction and device, or after setId) takes a lock once.
  const TransferHandles* handlesFor(Direction direction, const tensorpipe::Device& device) {
    auto& last = last_[static_cast<int>(direction)];
    if (const Slot* slot = last.load(std::memory_order_acquire);
        slot != nullptr && slot->device == device) {
      return slot->handles;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Slot& slot : slots_) {
      if (slot.direction == direction && slot.device == device && slot.generation == generation_) {
        last.store(&slot, std::memory_order_release);
        return slot.handles;
      }
    }
    metrics::TransferLabels labels;
    labels.channel = shared_->name;
    labels.direction = direction;
    labels.peer = peer_.empty() ? "unknown" : peer_;
    labels.localDevice = deviceLabel(device);
    labels.remoteDevice = shared_->metrics.remoteDevice(peer_, labels.localDevice);
    // Slots are never erased (a deque keeps their addresses): a concurrent
    // reader may still hold one from before a setId.
    slots_.push_back({direction, device, generation_, &shared_->metrics.transfer(labels)});
    last.store(&slots_.back(), std::memory_order_release);
    return slots_.back().handles;
  }

  const std::shared_ptr<Shared> shared_;
  const std::shared_ptr<tensorpipe::channel::Channel> inner_;
  std::atomic<const Slot*> last_[2] = {nullptr, nullptr};
  std::mutex mutex_;
  std::string peer_;              // guarded by mutex_
  std::uint64_t generation_ = 0;  // guarded by mutex_
  std::deque<Slot> slots_;        // guarded by mutex_
};

class InstrumentedChannelContext final : public tensorpipe::channel::Context {
 public:
  InstrumentedChannelContext(std::shared_ptr<Shared> shared,
                             std::shared_ptr<tensorpipe::channel::Context> inner)
      : shared_(std::move(shared)), inner_(std::move(inner)) {}

  bool isViable() const override { return inner_->isViable(); }
  size_t numConnectionsNeeded() const override { return inner_->numConnectionsNeeded(); }
  const std::unordered_map<tensorpipe::Device, std::string>& deviceDescriptors() const override {
    return inner_->deviceDescriptors();
  }
  bool canCommunicateWithRemote(const std::string& localDeviceDescriptor,
                                const std::string& remoteDeviceDescriptor) const override {
    return inner_->canCommunicateWithRemote(localDeviceDescriptor, remoteDeviceDescriptor);
  }

  std::shared_ptr<tensorpipe::channel::Channel> createChannel(
      std::vector<std::shared_ptr<tensorpipe::transport::Connection>> connections,
      tensorpipe::channel::Endpoint endpoint) override {
    return std::make_shared<InstrumentedChannel>(
        shared_, inner_->createChannel(std::move(connections), endpoint));
  }

  void setId(std::string id) override {
    shared_->contextId.set(id, shared_->name);
    inner_->setId(std::move(id));
  }

  void close() override { inner_->close(); }
  void join() override { inner_->join(); }

 private:
  const std::shared_ptr<Shared> shared_;
  const std::shared_ptr<tensorpipe::channel::Context> inner_;
};

}  // namespace

std::shared_ptr<tensorpipe::channel::Context> instrumentChannel(
    std::string name, std::shared_ptr<tensorpipe::channel::Context> inner,
    metrics::ChannelMetrics& metrics, std::shared_ptr<TransferTimer> timer) {
  return std::make_shared<InstrumentedChannelContext>(
      std::make_shared<Shared>(std::move(name), metrics, std::move(timer)), std::move(inner));
}

}  // namespace instrument
}  // namespace rpcjob
