// The transport decorator: context, listener and connection.
//
// A connection learns its peer from setId(), which TensorPipe calls with a
// pipe-derived id ("<pipe>.tr_uv", "<pipe>.ch_basic_0", ...) -- but an accepted
// connection reads the handshake before the pipe exists, under a provisional
// id. Bytes seen before the peer is known are kept in the connection's own
// counters and added to the peer's series when it binds (or to peer "unknown"
// when the connection goes away unbound).

#include <atomic>
#include <utility>

#include <tensorpipe/common/nop.h>
#include <tensorpipe/transport/connection.h>
#include <tensorpipe/transport/listener.h>

#include "context_id.h"
#include "rpcjob/instrument/instrument.h"
#include "rpcjob/metrics/atomic_metrics.h"
#include "rpcjob/metrics/channel_metrics.h"
#include "rpcjob/metrics/recording.h"

namespace rpcjob {
namespace instrument {
namespace {

using tensorpipe::Error;

struct Shared {
  Shared(std::string n, metrics::ChannelMetrics& m) : name(std::move(n)), metrics(m) {}
  const std::string name;
  metrics::ChannelMetrics& metrics;
  ContextId contextId;
};

// Counting state of one connection; outlives the connection object while its
// callbacks are in flight.
class Counts {
 public:
  explicit Counts(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  ~Counts() {
    if (bound_.load() == nullptr) {
      bind("unknown");
    }
    flush(*bound_.load());
  }

  void sent(size_t bytes) noexcept {
    add(bytes, pendingSent_, &metrics::TransportHandles::bytesSent);
  }
  void received(size_t bytes) noexcept {
    add(bytes, pendingReceived_, &metrics::TransportHandles::bytesReceived);
  }
  void error() noexcept {
    if (auto* handles = bound_.load(std::memory_order_acquire)) {
      handles->errors->add(1);
    } else {
      pendingErrors_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // The peer's handles once the connection knows its peer, else null.
  const metrics::TransportHandles* bound() const noexcept {
    return bound_.load(std::memory_order_acquire);
  }

  void setId(const std::string& id) {
    std::string peer = shared_->contextId.peerOf(id);
    if (!peer.empty() && bound_.load() == nullptr) {
      bind(peer);
    }
  }

 private:
  void add(size_t bytes, std::atomic<std::uint64_t>& pending,
           metrics::AtomicCounter* metrics::TransportHandles::*counter) noexcept {
    if (auto* handles = bound_.load(std::memory_order_acquire)) {
      (handles->*counter)->add(bytes);
    } else {
      pending.fetch_add(bytes, std::memory_order_relaxed);
    }
  }

  void bind(const std::string& peer) {
    auto& handles = shared_->metrics.transport(shared_->name, peer);
    handles.connections->add(1);
    bound_.store(&handles, std::memory_order_release);
    flush(handles);
  }

  void flush(metrics::TransportHandles& handles) {
    if (auto n = pendingSent_.exchange(0)) {
      handles.bytesSent->add(n);
    }
    if (auto n = pendingReceived_.exchange(0)) {
      handles.bytesReceived->add(n);
    }
    if (auto n = pendingErrors_.exchange(0)) {
      handles.errors->add(n);
    }
  }

  const std::shared_ptr<Shared> shared_;
  std::atomic<metrics::TransportHandles*> bound_{nullptr};
  std::atomic<std::uint64_t> pendingSent_{0};
  std::atomic<std::uint64_t> pendingReceived_{0};
  std::atomic<std::uint64_t> pendingErrors_{0};
};

class InstrumentedConnection final : public tensorpipe::transport::Connection {
 public:
  InstrumentedConnection(std::shared_ptr<Shared> shared,
                         std::shared_ptr<tensorpipe::transport::Connection> inner)
      : counts_(std::make_shared<Counts>(std::move(shared))), inner_(std::move(inner)) {}

  void read(read_callback_fn fn) override {
    if (!metrics::recording(metrics::Recorder::kTransports)) return inner_->read(std::move(fn));
    inner_->read(
        [counts{counts_}, fn{std::move(fn)}](const Error& error, const void* ptr, size_t length) {
          error ? counts->error() : counts->received(length);
          fn(error, ptr, length);
        });
  }

  // Reads into a buffer of known length (payloads), and writes, are counted when
  // issued, with no wrapped callback: a wrapper costs a heap allocation and two
  // reference count updates per operation, and a small call makes eight of
  // these. They complete unless the connection breaks, and a broken connection
  // fails the descriptor read that is always waiting on it, which is counted.
  void read(void* ptr, size_t length, read_callback_fn fn) override {
    if (metrics::recording(metrics::Recorder::kTransports)) counts_->received(length);
    inner_->read(ptr, length, std::move(fn));
  }

  void write(const void* ptr, size_t length, write_callback_fn fn) override {
    if (metrics::recording(metrics::Recorder::kTransports)) counts_->sent(length);
    inner_->write(ptr, length, std::move(fn));
  }

  void read(tensorpipe::AbstractNopHolder& object, read_nop_callback_fn fn) override {
    if (!metrics::recording(metrics::Recorder::kTransports))
      return inner_->read(object, std::move(fn));
    // Once bound, the callback needs only the peer's handles, which live as
    // long as the metrics (longer than any TensorPipe context): no reference
    // to the connection's counts, whose count updates cost two atomic adds.
    if (const auto* handles = counts_->bound()) {
      inner_->read(object, [handles, &object, fn{std::move(fn)}](const Error& error) {
        error ? handles->errors->add(1) : handles->bytesReceived->add(object.getSize());
        fn(error);
      });
      return;
    }
    inner_->read(object, [counts{counts_}, &object, fn{std::move(fn)}](const Error& error) {
      error ? counts->error() : counts->received(object.getSize());
      fn(error);
    });
  }

  void write(const tensorpipe::AbstractNopHolder& object, write_callback_fn fn) override {
    if (metrics::recording(metrics::Recorder::kTransports)) counts_->sent(object.getSize());
    inner_->write(object, std::move(fn));
  }

  void setId(std::string id) override {
    counts_->setId(id);
    inner_->setId(std::move(id));
  }

  void close() override { inner_->close(); }

 private:
  const std::shared_ptr<Counts> counts_;
  const std::shared_ptr<tensorpipe::transport::Connection> inner_;
};

std::shared_ptr<tensorpipe::transport::Connection> wrap(
    const std::shared_ptr<Shared>& shared,
    std::shared_ptr<tensorpipe::transport::Connection> inner) {
  if (!inner) {
    return inner;
  }
  return std::make_shared<InstrumentedConnection>(shared, std::move(inner));
}

class InstrumentedListener final : public tensorpipe::transport::Listener {
 public:
  InstrumentedListener(std::shared_ptr<Shared> shared,
                       std::shared_ptr<tensorpipe::transport::Listener> inner)
      : shared_(std::move(shared)), inner_(std::move(inner)) {}

  void accept(accept_callback_fn fn) override {
    inner_->accept(
        [shared{shared_}, fn{std::move(fn)}](
            const Error& error, std::shared_ptr<tensorpipe::transport::Connection> connection) {
          fn(error, wrap(shared, std::move(connection)));
        });
  }
  std::string addr() const override { return inner_->addr(); }
  void setId(std::string id) override { inner_->setId(std::move(id)); }
  void close() override { inner_->close(); }

 private:
  const std::shared_ptr<Shared> shared_;
  const std::shared_ptr<tensorpipe::transport::Listener> inner_;
};

class InstrumentedTransportContext final : public tensorpipe::transport::Context {
 public:
  InstrumentedTransportContext(std::shared_ptr<Shared> shared,
                               std::shared_ptr<tensorpipe::transport::Context> inner)
      : shared_(std::move(shared)), inner_(std::move(inner)) {}

  std::shared_ptr<tensorpipe::transport::Connection> connect(std::string addr) override {
    return wrap(shared_, inner_->connect(std::move(addr)));
  }
  std::shared_ptr<tensorpipe::transport::Listener> listen(std::string addr) override {
    auto inner = inner_->listen(std::move(addr));
    if (!inner) {
      return inner;
    }
    return std::make_shared<InstrumentedListener>(shared_, std::move(inner));
  }
  bool isViable() const override { return inner_->isViable(); }
  const std::string& domainDescriptor() const override { return inner_->domainDescriptor(); }
  bool canCommunicateWithRemote(const std::string& remoteDomainDescriptor) const override {
    return inner_->canCommunicateWithRemote(remoteDomainDescriptor);
  }
  void setId(std::string id) override {
    shared_->contextId.set(id, shared_->name);
    inner_->setId(std::move(id));
  }
  void close() override { inner_->close(); }
  void join() override { inner_->join(); }

 private:
  const std::shared_ptr<Shared> shared_;
  const std::shared_ptr<tensorpipe::transport::Context> inner_;
};

}  // namespace

std::shared_ptr<tensorpipe::transport::Context> instrumentTransport(
    std::string name, std::shared_ptr<tensorpipe::transport::Context> inner,
    metrics::ChannelMetrics& metrics) {
  return std::make_shared<InstrumentedTransportContext>(
      std::make_shared<Shared>(std::move(name), metrics), std::move(inner));
}

}  // namespace instrument
}  // namespace rpcjob
