#pragma once
// The protocol rpcjob's copy channels share (channels/mtcma, cuda/nvlink_channel):
// the sender posts one fixed-size message describing its buffer on the control
// connection and holds the send until the receiver acks, since the receiver reads
// the sender's memory in place; the receiver pairs receives with arrived sends in
// order (TensorPipe posts them in the same order on both sides), copies, and acks.
// The first error fails everything pending, on both sides: a peer cannot tell how
// far the other got. So does a control message of the wrong size or an unknown
// kind: the peer is broken or hostile.
//
// A channel may add control messages of its own (rpcjob_cma's push: the
// receiver asks the sender to write into its memory): onControl() gets every
// kind beyond kSend and kAck; takeSend() hands it a pending send to complete
// itself; park() holds a receive until the sender's answer, and the channel's
// failure fails parked receives after abandon().
//
// A channel derives from CopyChannel<Itself, Wire, PendingSend, PendingRecv> and
// befriends it. It supplies:
//   Wire: trivially copyable, with `CopyKind kind`, `uint64_t seq`, `uint64_t length`
//   PendingSend: `TSendCallback callback`;  PendingRecv: `size_t length`,
//     `TRecvCallback callback`
//   static Error makeError(const std::string&)
//   bool describe(Buffer&, Wire&, PendingSend&, std::string& error): the sender's side
//   void release(PendingSend&): a send that ends without reaching its ack
//   Error acked(PendingSend&, const Wire& ack)
//   static PendingRecv pendingRecv(Buffer&, size_t length, TRecvCallback)
//   void copy(PendingRecv, const Wire& send): ends in acknowledge() or fail()
// and may hide (defaults: unknown kind, nothing):
//   bool onControl(const Wire&): false fails the channel (an unknown kind)
//   void abandon(PendingRecv&): a parked receive failed by the channel's failure
// The calls are resolved at compile time: the hot path costs what a hand-written
// channel does.

#include <tensorpipe/channel/channel.h>
#include <tensorpipe/common/buffer.h>
#include <tensorpipe/common/error.h>
#include <tensorpipe/transport/connection.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "../trace/trace.h"

namespace rpcjob::runtime::channels {

// The first field of every control message, as it has always been on the wire.
// kPushRequest and kPushed: rpcjob_cma's push (mtcma_channel.h), unknown to others.
enum class CopyKind : uint32_t { kSend = 1, kAck = 2, kPushRequest = 3, kPushed = 4 };

// "<channel>: <what>", the text TensorPipe reports for a channel's errors.
class ChannelError final : public tensorpipe::BaseError {
 public:
  ChannelError(const char* channel, std::string what) : channel_(channel), what_(std::move(what)) {}
  std::string what() const override { return std::string(channel_) + ": " + what_; }

 private:
  const char* channel_;
  std::string what_;
};

// What CopyContext needs of its channels beyond TensorPipe's interface.
class CopyChannelBase : public tensorpipe::channel::Channel {
 public:
  // Starts reading the control connection; called once, right after creation.
  virtual void start() = 0;
};

template <typename Impl, typename Wire, typename PendingSend, typename PendingRecv>
class CopyChannel : public CopyChannelBase, public std::enable_shared_from_this<Impl> {
  static_assert(std::is_trivially_copyable_v<Wire>, "control messages are copied as bytes");

 public:
  explicit CopyChannel(std::shared_ptr<tensorpipe::transport::Connection> connection)
      : connection_(std::move(connection)) {}

  void start() final { readNext(); }

  void send(tensorpipe::Buffer buffer, size_t length,
            tensorpipe::channel::TSendCallback callback) final {
    if (length == 0) {
      callback(tensorpipe::Error::kSuccess);
      return;
    }
    auto m = std::make_shared<Wire>();
    m->kind = CopyKind::kSend;
    m->length = length;
    PendingSend s;
    s.callback = std::move(callback);
    std::string error;
    if (!impl().describe(buffer, *m, s, error)) {
      s.callback(Impl::makeError(error));
      return;
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!error_.empty()) {
        std::string e = error_;
        lock.unlock();
        impl().release(s);
        s.callback(Impl::makeError(e));
        return;
      }
      m->seq = nextSeq_++;
      sends_.emplace(m->seq, std::move(s));
    }
    trace::point("copy.send", length);  // its control message to the receiver
    post(std::move(m));
  }

  void recv(tensorpipe::Buffer buffer, size_t length,
            tensorpipe::channel::TRecvCallback callback) final {
    if (length == 0) {
      callback(tensorpipe::Error::kSuccess);
      return;
    }
    PendingRecv r = Impl::pendingRecv(buffer, length, std::move(callback));
    trace::point("copy.recv", length);  // the pipe asks for the bytes
    std::unique_lock<std::mutex> lock(mu_);
    if (!error_.empty()) {
      std::string e = error_;
      lock.unlock();
      r.callback(Impl::makeError(e));
      return;
    }
    recvs_.push_back(std::move(r));
    matchLocked(lock);
  }

  void setId(std::string) final {}
  void close() final { fail("channel closed"); }

 protected:
  // An ack for `send`, for the channel to complete and pass to acknowledge().
  static std::shared_ptr<Wire> ackFor(const Wire& send) {
    auto ack = std::make_shared<Wire>();
    ack->kind = CopyKind::kAck;
    ack->seq = send.seq;
    return ack;
  }

  // Acks the sender, then completes the receive ("": success).
  void acknowledge(std::shared_ptr<Wire> ack, PendingRecv& r, const std::string& error) {
    post(std::move(ack));
    trace::point("copy.received");  // the bytes are in; the pipe is told next
    r.callback(error.empty() ? tensorpipe::Error::kSuccess : Impl::makeError(error));
  }

  // Acks the sender alone, for a channel that completed the receive earlier (the
  // data ordered on the receiver's stream) and acks once its copy has finished.
  void acknowledgeLater(std::shared_ptr<Wire> ack) { post(std::move(ack)); }

  // Defaults of what a channel may hide (see the top).
  bool onControl(const Wire&) { return false; }
  void abandon(PendingRecv&) {}

  // The pending send `seq`, taken out: from now on the channel completes it
  // itself, and a failure of the channel no longer does. Empty when there is
  // no such send (or the channel failed).
  std::optional<PendingSend> takeSend(uint64_t seq) {
    std::lock_guard<std::mutex> lock(mu_);
    return take(sends_, seq);
  }

  // Holds `r` under its send's seq until unpark(); when the channel has failed
  // already, abandons and fails it at once.
  void park(uint64_t seq, PendingRecv r) {
    std::unique_lock<std::mutex> lock(mu_);
    if (error_.empty()) {
      parked_.emplace(seq, std::move(r));
      return;
    }
    std::string e = error_;
    lock.unlock();
    impl().abandon(r);
    r.callback(Impl::makeError(e));
  }
  std::optional<PendingRecv> unpark(uint64_t seq) {
    std::lock_guard<std::mutex> lock(mu_);
    return take(parked_, seq);
  }

  // `m` lives until the write completes.
  void post(std::shared_ptr<Wire> m) {
    auto self = this->shared_from_this();
    const Wire* bytes = m.get();
    connection_->write(bytes, sizeof(Wire), [self, m = std::move(m)](const tensorpipe::Error& e) {
      if (e) self->fail(e.what());
    });
  }

  // Why the channel failed, "" while it works.
  std::string failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  void fail(const std::string& why) {
    std::map<uint64_t, PendingSend> sends;
    std::deque<PendingRecv> recvs;
    std::map<uint64_t, PendingRecv> parked;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.empty()) error_ = why;
      sends.swap(sends_);
      recvs.swap(recvs_);
      parked.swap(parked_);
      arrived_.clear();
    }
    connection_->close();
    for (auto& [seq, s] : sends) {
      impl().release(s);
      s.callback(Impl::makeError(why));
    }
    for (auto& r : recvs) r.callback(Impl::makeError(why));
    for (auto& [seq, r] : parked) {
      impl().abandon(r);
      r.callback(Impl::makeError(why));
    }
  }

 private:
  Impl& impl() { return static_cast<Impl&>(*this); }

  // The entry `seq` of a pending map, removed (mu_ held); empty when absent.
  template <typename Pending>
  static std::optional<Pending> take(std::map<uint64_t, Pending>& from, uint64_t seq) {
    auto it = from.find(seq);
    if (it == from.end()) return std::nullopt;
    std::optional<Pending> taken(std::move(it->second));
    from.erase(it);
    return taken;
  }

  void readNext() {
    auto self = this->shared_from_this();
    connection_->read([self](const tensorpipe::Error& e, const void* ptr, size_t length) {
      if (e) {
        self->fail(e.what());
        return;
      }
      if (length != sizeof(Wire)) {
        self->fail("malformed control message (" + std::to_string(length) + " bytes)");
        return;
      }
      Wire m;
      std::memcpy(&m, ptr, sizeof(m));
      if (m.kind == CopyKind::kAck) {
        self->onAck(m);
      } else if (m.kind == CopyKind::kSend) {
        trace::point("copy.control", m.length);  // the sender's control message is here
        std::unique_lock<std::mutex> lock(self->mu_);
        self->arrived_.push_back(m);
        self->matchLocked(lock);
      } else if (!self->impl().onControl(m)) {
        self->fail("unknown control message kind");
        return;
      }
      self->readNext();
    });
  }

  void onAck(const Wire& ack) {
    trace::point("copy.acked");
    std::optional<PendingSend> s = takeSend(ack.seq);
    if (!s) return;
    tensorpipe::Error result = impl().acked(*s, ack);
    s->callback(result);
  }

  // The copies run outside the lock: they may take long, or complete inline.
  void matchLocked(std::unique_lock<std::mutex>& lock) {
    while (!recvs_.empty() && !arrived_.empty()) {
      PendingRecv r = std::move(recvs_.front());
      recvs_.pop_front();
      Wire m = arrived_.front();
      arrived_.pop_front();
      lock.unlock();
      impl().copy(std::move(r), m);
      lock.lock();
    }
  }

  std::shared_ptr<tensorpipe::transport::Connection> connection_;
  std::mutex mu_;
  std::string error_;
  uint64_t nextSeq_ = 1;
  std::map<uint64_t, PendingSend> sends_;
  std::deque<PendingRecv> recvs_;
  std::deque<Wire> arrived_;
  std::map<uint64_t, PendingRecv> parked_;  // by their sends' seq
};

}  // namespace rpcjob::runtime::channels
