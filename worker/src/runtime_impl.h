#pragma once
// The state behind Runtime. Two pipes per pair of workers, as in PyTorch's
// TensorPipe agent: each worker connects a client pipe to every peer (it writes
// requests and reads responses on it) and accepts the peers' client pipes as
// server pipes (it reads requests and writes responses). Requests are read,
// dispatched and, for inline functions, answered on TensorPipe's own threads;
// responses complete futures there too: no thread hand-off on the fast path.

#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "auth/pipe_gate.h"
#include "future_state.h"
#include "header_codec.h"
#include "lane/order.h"
#include "pending_calls.h"
#include "pending_slots.h"
#include "rpcjob/runtime/runtime.h"
#include "rref_context.h"
#include "serialization.h"
#include "spin_mutex.h"
#include "tensorpipe_registry.h"
#include "thread_pool.h"
#if RPCJOB_WITH_CUDA
#include "cuda/device_maps.h"
#endif

namespace tensorpipe {
class Context;
class Listener;
class Pipe;
class Error;
}  // namespace tensorpipe

namespace rpcjob::runtime {
namespace lane {
class Lane;
class Poller;
}  // namespace lane
namespace autograd {
class Container;
}
namespace cuda_lane {
class Sender;
class Receiver;
}  // namespace cuda_lane
namespace startup {
class LeaderBarrier;
}

using Clock = std::chrono::steady_clock;

class RuntimeImpl {
 public:
  RuntimeImpl(Runtime& owner, Assignment assignment, const std::string& name,
              RuntimeOptions options);
  ~RuntimeImpl();

  // Initialization (runtime.cc)
  void registerFunction(const std::string& name, Function fn, AsyncFunction async,
                        FunctionOptions options);
  void start();

  // Identity
  const WorkerInfo& self() const { return workers_[selfRank_]; }
  // The worker on the other end of a server pipe; "?" (rank -1) before its
  // handshake named it.
  const WorkerInfo& callerOf(int callerRank) const;
  const std::vector<WorkerInfo>& workers() const { return workers_; }
  int rankOf(const std::string& name) const;  // throws kInvalidArgument

  // Calls (runtime_calls.cc). `value` may be null for header-only messages.
  // `inverseDeviceMap` (CUDA build): place tensors on `to` with the inverse of
  // its map to us, as its calls' responses are (distributed autograd sends the
  // gradients of a request's tensors back that way).
  Future sendRequest(int to, wire::Header header, const c10::IValue* value, CallOptions options,
                     bool inverseDeviceMap = false);
  Future rpcAsync(const std::string& to, const std::string& function, std::vector<c10::IValue> args,
                  CallOptions options);

  // RRefs (rref.cc)
  RRef remote(const std::string& to, const std::string& function, std::vector<c10::IValue> args,
              CallOptions options);
  RRef rrefFromIValue(const c10::IValue& value);
  RRefContext& rrefs() { return *rrefs_; }
  // An RRef owned here: of a value (Python's RRef(x)), of a future value.
  RRef makeRRef(c10::IValue value);
  RRef ownedRRef(const Future& value);
  // Runs a registered function here, on the pool, as a call from ourselves.
  Future callHere(const std::string& function, std::vector<c10::IValue> args);
  // The wire form of an RRef: a fork of it for one receiver (RRef::toIValue()
  // before RRefs were values); and the receiver's side of the fork protocol.
  // A fork made for a message, undone (unfork) when the message is not sent.
  struct Forked {
    GloballyUniqueId rref;
    GloballyUniqueId fork;
    bool owner = false;
  };
  c10::IValue forkForWire(const RRef& rref, std::vector<Forked>* made = nullptr);
  RRef adoptFork(const c10::IValue& fork);
  static bool isWireFork(const c10::IValue& value);
  // RRefs inside values (rref_values.cc): `value` with each RRef replaced by a
  // fork, to send; a received value with each fork replaced by its RRef
  // (throws RpcError for a malformed one).
  // By value: a call's freshly made tuple moves through without a reference
  // count's two locked instructions when it holds no RRef (the common case).
  c10::IValue forkRRefs(c10::IValue value, std::vector<Forked>* made = nullptr);
  c10::IValue adoptRRefs(const c10::IValue& value);
  void unfork(const std::vector<Forked>& made);
  // unfork() when `sent` failed before its message could go (sendRequest
  // fails those at once); a message that went is the receiver's to release.
  void unforkIfUnsent(const Future& sent, const std::vector<Forked>& made);
  // Distributed autograd (autograd/container.h).
  autograd::Container& autograd() { return *autograd_; }

  std::vector<ChannelChoice> channelChoices() const;
  void shutdown(ShutdownMode mode, std::chrono::milliseconds deadline);  // shutdown.cc
  bool closed() const { return closed_.load(); }

  std::shared_ptr<ThreadPool> pool() const { return pool_; }
  const RuntimeOptions& options() const { return options_; }
  Runtime& owner() { return owner_; }
  uint64_t nextLocalId() { return nextLocalId_.fetch_add(1); }
  std::weak_ptr<RuntimeImpl> weakSelf_;  // set by Runtime right after construction

 private:
  friend class ShutdownCoordinator;
  struct Registered {
    Function fn;
    AsyncFunction async;
    FunctionOptions options;
  };
  // Writes to one pipe: while one is in flight, later messages queue and go out
  // together when it completes (tensorless ones as one kBatch message).
  //
  // Small messages carry their payload inline (OutgoingMessage::inlinePayload):
  // one transport message instead of two, and TensorPipe completes such a
  // write at once, inside pipe->write(). So a write in flight no longer opens
  // a window in which the next messages queue up, and batches need a reason
  // of their own. On a client pipe, a request that finds calls to its peer
  // still unanswered (a burst of rpcAsync) keeps its payload apart, and so do
  // the batches that follow: their writes complete only once TensorPipe's loop
  // wrote them, while the caller queues the next ones. On a server pipe, the
  // responses produced while one read message (or batch) is dispatched are
  // held (`corked`) and go out together when the dispatch returns.
  struct WriteQueue {
    std::mutex mu;
    bool busy = false;  // writes in flight (or a flush pending, or corked)
    std::vector<std::shared_ptr<OutgoingMessage>> queued;
    bool client = false;  // batches keep their payload apart (above)
    // Sees the pipe's write failures; set before the first write, null on a
    // server pipe. Kept here, not passed along with each message: a
    // std::function copy per write was an allocation per call.
    std::function<void(const std::string&)> onError;
    // The pipe's shared-memory lane (runtime_lane.cc), under `mu`. Once set,
    // small messages go on it and every message carries its order
    // (wire::kHasOrder): `pipeSent` and `laneSent` count what went each way.
    std::shared_ptr<lane::Lane> lane;
    // Set with `lane`, cleared when it closes: read without `mu`, as a hint
    // of where a call goes (registerPending).
    std::atomic<bool> laneUp{false};
    std::shared_ptr<lane::Lane> offered;  // a client's lane awaiting kLaneReply
    // A client's, under `mu` (CUDA build): lends CUDA tensors of requests to
    // the server as IPC handles in lane frames (cuda_lane/), once the server's
    // kLaneReply said it takes them; `offeredSender` until then.
    std::shared_ptr<cuda_lane::Sender> deviceSender;
    std::shared_ptr<cuda_lane::Sender> offeredSender;
    uint64_t pipeSent = 0;
    uint64_t laneSent = 0;
    // The receiving side's order between this pipe's reads and its peer's lane.
    std::shared_ptr<lane::Order> order = std::make_shared<lane::Order>();
  };
  // Our client side of the pipe to one peer.
  struct Peer {
    WorkerInfo info;
    std::string url;
    std::mutex mu;
    std::shared_ptr<tensorpipe::Pipe> pipe;  // null: not connected
    std::shared_ptr<WriteQueue> writes;      // the pipe's
    uint64_t generation = 0;                 // bumped per pipe, so stale errors are ignored
    bool handshakeDone = false;
    std::string lastError;
    std::condition_variable handshakeCv;
    Clock::time_point connectStart;
    std::vector<ChannelChoice> choices;
  };
  struct Pending {
    std::shared_ptr<detail::FutureState> future;
    int peer;
    uint64_t generation;
    Clock::time_point deadline;    // max(): none
    std::string function;          // only with an observer
    Observer::CallToken observed;  // only with an observer
  };
  // A server pipe, one per peer connection we accepted.
  struct ServerPipe {
    std::shared_ptr<tensorpipe::Pipe> pipe;
    int callerRank = -1;
    WriteQueue writes;
  };

  // runtime.cc
  void acceptLoop();
  void relisten(const std::string& why);  // after TensorPipe's listener failed
  void onAccepted(std::shared_ptr<tensorpipe::Pipe> pipe);
  void serveAdmitted(std::shared_ptr<tensorpipe::Pipe> pipe);  // after the gate, if any
  // Reads messages one after another, calling onMessage for each, until an error.
  // onError gets why; and, when this worker refused a message whose header it
  // could read (too large, bad tensors), that header, so that the caller can be
  // told why (else null). The pipe is not read again either way.
  using ReadErrorFn = std::function<void(const std::string& why, const wire::Header* refused)>;
  // `server`: a server pipe, whose responses are corked while a message is
  // dispatched (WriteQueue).
  void readLoop(std::shared_ptr<tensorpipe::Pipe> pipe,
                std::function<void(IncomingMessage&)> onMessage, ReadErrorFn onError,
                std::shared_ptr<ServerPipe> server = nullptr,
                std::shared_ptr<lane::Order> order = nullptr);
  // One pipe's read loop: what every read's callbacks need, made once per pipe
  // instead of moved into two fresh closures per message, and one message read
  // into again and again (its buffers' capacity kept; cleared after each
  // dispatch). A pipe reads one message at a time, and nothing keeps a
  // reference to it past its dispatch.
  struct PipeReader {
    std::shared_ptr<tensorpipe::Pipe> pipe;
    std::function<void(IncomingMessage&)> onMessage;
    ReadErrorFn onError;
    std::shared_ptr<ServerPipe> server;
    std::shared_ptr<lane::Order> order;  // null: the pipe has no lane
    IncomingMessage msg;
  };
  void readNext(std::shared_ptr<PipeReader> reader);
  // The message read: dispatched in order with the lane, then the next read.
  void dispatchRead(std::shared_ptr<PipeReader> reader);
  // Holds `server`'s writes (true), unless a write is in flight anyway; then
  // writes what was queued meanwhile, as one batch where it can.
  bool corkWrites(ServerPipe& server);
  void uncorkWrites(const std::shared_ptr<ServerPipe>& server);
  // Hands a message just read to onMessage (each message of a batch, in turn),
  // with its arrival time set (IncomingMessage::arrived); an error string for a
  // malformed batch.
  std::string dispatch(IncomingMessage& msg, const std::function<void(IncomingMessage&)>& onMessage,
                       lane::Order* order = nullptr);
  // Splits a kBatch message and hands each message in it to onMessage; an error
  // string for a malformed batch.
  std::string dispatchBatch(IncomingMessage& batch,
                            const std::function<void(IncomingMessage&)>& onMessage,
                            lane::Order* order);
  std::shared_ptr<tensorpipe::Pipe> pipeTo(int rank, uint64_t& generation,
                                           std::shared_ptr<WriteQueue>* writes = nullptr);
  void connectLocked(Peer& peer);  // the caller starts the pipe once unlocked
  void startClientPipe(int rank, uint64_t generation, std::shared_ptr<tensorpipe::Pipe> pipe,
                       std::shared_ptr<WriteQueue> writes);
  void startAdmitted(int rank, uint64_t generation, std::shared_ptr<tensorpipe::Pipe> pipe,
                     std::shared_ptr<WriteQueue> writes);
  // runtime_auth.cc: the gate when a secret is set (else a warning), and what a
  // refused handshake with `peer` does: count and log it, then `then(why)`.
  void startGate();  // first in start(): a bad secret fails before anything listens
  auth::PipeGate::Refused handshakeRefused(const std::string& peer,
                                           std::function<void(const std::string&)> then);
  // Writes `message` now, or queues it behind the writes in flight; write
  // failures go to writes.onError. `keepAlive` owns `writes`. Never called with
  // a lock held: TensorPipe may run the callbacks inline.
  // `activate`: from this message on, the pipe's lane carries what it can
  // (runtime_lane.cc); set under the same lock, so nothing sent on the pipe
  // before goes unordered.
  void enqueueWrite(const std::shared_ptr<tensorpipe::Pipe>& pipe, WriteQueue& writes,
                    std::shared_ptr<OutgoingMessage> message, std::shared_ptr<void> keepAlive,
                    std::shared_ptr<lane::Lane> activate = nullptr);
  void flushWrites(const std::shared_ptr<tensorpipe::Pipe>& pipe, WriteQueue& writes,
                   std::vector<std::shared_ptr<OutgoingMessage>> messages,
                   std::shared_ptr<void> keepAlive);
  // One TensorPipe write of flushWrites; the last of the writes in flight
  // (`left`, null when it is alone) writes what was queued meanwhile.
  using WritesLeft = std::shared_ptr<std::atomic<size_t>>;
  void writeUnit(const std::shared_ptr<tensorpipe::Pipe>& pipe, WriteQueue& writes,
                 std::shared_ptr<OutgoingMessage> unit, WritesLeft left,
                 std::shared_ptr<void> keepAlive);
  void writeCompleted();  // one of writesInFlight_ is done
  // enqueueWrite for several messages, in order (a CallBatch's to one pipe).
  void enqueueWrites(const std::shared_ptr<tensorpipe::Pipe>& pipe, WriteQueue& writes,
                     std::vector<std::shared_ptr<OutgoingMessage>> messages,
                     std::shared_ptr<void> keepAlive);

 public:
  // call_batch.cc: the requests a CallBatch holds on its thread, per pipe.
  struct HeldPipe {
    std::shared_ptr<tensorpipe::Pipe> pipe;
    std::shared_ptr<WriteQueue> writes;
    std::vector<std::shared_ptr<OutgoingMessage>> messages;
  };
  using HeldRequests = std::vector<HeldPipe>;
  // A CallBatch's frames for one pipe's lane, in order, not yet in its ring
  // (holdFrame): per frame its encoded header, then its payload, each after
  // its size (4 bytes).
  struct HeldFrames {
    std::shared_ptr<tensorpipe::Pipe> pipe;
    std::shared_ptr<WriteQueue> writes;
    std::string bytes;
    size_t count = 0;
  };
  // Writes them to the lane, published together; the first the lane cannot
  // take and all after it go to the pipe as messages, in order.
  void writeFrames(HeldFrames held);
  // Holds `message` when this thread's CallBatch is ours (true), else false.
  bool holdRequest(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                   const std::shared_ptr<WriteQueue>& writes,
                   std::shared_ptr<OutgoingMessage>& message);
  void writeHeld(HeldRequests held);

 private:
  // runtime_lane.cc: the shared-memory lane beside a pipe to a peer on this host.
  enum class Routed { kPipe, kLane, kBroken };
  // Under writes.mu: sends `message` on the lane when it may, else stamps it
  // with its order for the pipe. kBroken: the lane's ring is broken (`why`).
  // `hold`: a lane frame waits for writes.lane->publishHeld() (a batch's).
  Routed routeLocked(WriteQueue& writes, const std::shared_ptr<OutgoingMessage>& message,
                     std::string& why, bool hold = false);
  // Under writes.mu, with writes.lane set: `header` (as encoded, room left)
  // stamped with its order and followed by `payload` (when it has one), sent on
  // the lane. kPipe: the lane cannot take it now (closed, too large, full), and
  // `header` is as it was. What routeLocked, sendOnLane and writeFrames share.
  // `handles`: a frame's CUDA tensors as IPC handles (kDeviceHandles), or none.
  Routed sendFrameLocked(WriteQueue& writes, std::string& header, std::string_view payload,
                         bool hasPayload, bool hold, std::string& why,
                         std::string_view handles = {});
#if RPCJOB_WITH_CUDA
  // Under writes.mu: a request whose CUDA tensors writes.deviceSender lends the
  // server as handles, as one lane frame; kPipe when it cannot go so.
  Routed sendDeviceFrameLocked(WriteQueue& writes, const std::shared_ptr<OutgoingMessage>& message,
                               bool hold, std::string& why);
#endif
  // The client: the server copied a request frame's CUDA tensors (kLaneCopied).
  void onLaneCopied(int rank, uint64_t generation, IncomingMessage& msg);
  // The client, offering a lane to `rank`: what will lend its CUDA tensors on
  // it, when the pairs of devices allow (cuda_lane/lane_pairs.h); else null.
  std::shared_ptr<cuda_lane::Sender> deviceSenderFor(int rank,
                                                     const wire::ChannelDescriptors& remote);
  // The server, on its poller: sends a kLaneCopied answer on `lane` itself,
  // unordered; by `ordered` (copiedAnswer's) when the ring cannot take it.
  // False when the ring is broken (`why`): the lane must fail.
  bool answerCopied(WriteQueue& writes, lane::Lane& lane, uint64_t handoff, std::string copied,
                    const std::function<void(uint64_t, std::string)>& ordered, std::string& why);
  // The server: sends a kLaneCopied answer on `server`'s pipe (or its lane).
  std::function<void(uint64_t, std::string)> copiedAnswer(
      const std::shared_ptr<ServerPipe>& server);
  // What a server's lane does with frames that carry CUDA tensors as handles
  // (cuda_lane/).
  struct DeviceFrames {
    // Copies a frame's tensors; null: this lane does not take them.
    std::shared_ptr<cuda_lane::Receiver> receiver;
    // Sends a kLaneCopied the ordered way (copiedAnswer), when the ring is full.
    std::function<void(uint64_t, std::string)> answerOrdered;
    // Answers a frame that cannot be taken with why, as refuse() a pipe's.
    std::function<void(const wire::Header&, const std::string&)> refuse;
  };
  // `server`'s; `takes`: its lane takes CUDA tensors, from `clientPid`'s memory;
  // `landing`: the client takes landing offers (cuda_lane/README.md).
  DeviceFrames deviceFramesFor(const std::shared_ptr<ServerPipe>& server, bool takes,
                               int64_t clientPid, bool landing);
#if RPCJOB_WITH_CUDA
  // The server, on its poller after a frame with CUDA tensors: the receiver's
  // landing offers for their sizes, unordered on the lane; withdrawn when the
  // ring cannot take them.
  void sendLandingOffers(const std::weak_ptr<WriteQueue>& writes, lane::Lane& lane,
                         cuda_lane::Receiver& receiver);
#endif
  // The client: the server's landing offers (kLaneOffers).
  void onLaneOffers(int rank, uint64_t generation, IncomingMessage& msg);
#if RPCJOB_WITH_CUDA
  // What lends `rank`'s current pipe CUDA tensors on its lane (null: nothing);
  // false when `generation` is no longer that pipe's (the message is stale).
  bool currentDeviceSender(int rank, uint64_t generation,
                           std::shared_ptr<cuda_lane::Sender>& sender);
#endif
  void laneBroken(WriteQueue& writes, const std::string& why);
  // A request's or an answer's lane frame made without an OutgoingMessage
  // (encodeInline): the encoded header, then the order field and the payload,
  // appended under the write lock. One per thread, reused, lent for one send by
  // a LaneFrameLoan.
  struct LaneFrame {
    std::string header;
    std::vector<char> payload;
    bool lent = false;
  };
  // The thread's LaneFrame for as long as it lives; none (get() null) when
  // not wanted, or while it is lent already (a call made from a callback that
  // runs inside another's send).
  class LaneFrameLoan {
   public:
    explicit LaneFrameLoan(bool wanted);
    ~LaneFrameLoan();
    LaneFrameLoan(const LaneFrameLoan&) = delete;
    LaneFrameLoan& operator=(const LaneFrameLoan&) = delete;
    LaneFrame* get() const { return frame_; }

   private:
    LaneFrame* frame_ = nullptr;
  };
  // Sends `frame` on `writes`' lane, as routeLocked an OutgoingMessage; false
  // when the lane cannot take it now (none, closed, too large, full), and the
  // caller then makes it a message for the pipe (laneFrameMessage). A broken
  // lane breaks the pipe (its calls fail with it) and counts as sent.
  bool sendOnLane(WriteQueue& writes, LaneFrame& frame);
  // call_batch.cc: holds `frame` when this thread's CallBatch is ours, for
  // writeFrames at the batch's flush (or a wait, or every kHeldPerPipe); false
  // when it may not: no lane, or messages of the batch held for this pipe,
  // which it must not overtake (it is held as one of them).
  bool holdFrame(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                 const std::shared_ptr<WriteQueue>& writes, LaneFrame& frame);
  static std::shared_ptr<OutgoingMessage> laneFrameMessage(std::string_view header,
                                                           std::string_view payload);
  // Ends the pipe's lane: its poller drops it, waits on its order end.
  void closeLane(WriteQueue& writes);
  wire::DeviceDescriptors laneDescriptor() const;
  // The client, after the handshake: creates and offers a lane when the peer
  // takes lanes and runs on this host.
  void offerLane(int rank, uint64_t generation, const wire::ChannelDescriptors& remote);
  void onLaneReply(int rank, uint64_t generation, IncomingMessage& msg);
  // The client pipe to `rank` and its writes while that pipe is still
  // `generation` (false: it failed or was replaced since).
  bool currentClientPipe(int rank, uint64_t generation, std::shared_ptr<tensorpipe::Pipe>& pipe,
                         std::shared_ptr<WriteQueue>& writes);
  void onLaneOffer(const std::shared_ptr<ServerPipe>& server, IncomingMessage& msg);
  // The frames of a lane, turned into messages for `onMessage` as the pipe's are,
  // in the order of `writes` (the pipe's, whose lock the lane's sends take; its
  // held frames are published under it, lane.h).
  // `deviceFrames`: what a server's lane does with frames that carry CUDA
  // tensors as handles (a client's lane has none: such a frame fails it).
  lane::Lane* prepareLane(const std::shared_ptr<lane::Lane>& lane,
                          const std::shared_ptr<WriteQueue>& writes,
                          std::function<void(IncomingMessage&)> onMessage,
                          std::function<void(const std::string&)> onBroken, std::string& why,
                          DeviceFrames deviceFrames = {});
  lane::Poller* lanePoller(std::string& why);
  void stopLanes();

  // The observer's serverCallFinished for the calls `message` answers, once it
  // is written (or its write failed: the call was served all the same).
  void recordServed(const OutgoingMessage& message);
  // The same for one served call (an answer that went as a lane frame).
  void recordServed(const ServedCall& call, const EventTime& now);
  // A call answered during a lane's turn on its poller: its answer is held until
  // the turn publishes it (lane.h), so it is recorded then (recordServedInTurn,
  // from the lane's publisher), not before: recording would delay the answer,
  // and the call is not answered until its frame is visible. Per thread.
  void deferServed(ServedCall call);
  // Records the calls deferred on this thread, with one clock read for them.
  void recordServedInTurn();
  // A written message with CUDA tensors: kept until a GPU step (release_later.h).
  void holdDeviceTensors(const std::shared_ptr<OutgoingMessage>& message);
  bool waitHandshake(int rank, Clock::time_point deadline, std::string& error);
  // StartPipes::kFullMesh: a pipe to every worker, every handshake awaited.
  void connectEveryPeer(Clock::time_point deadline);
  void onClientMessage(int rank, uint64_t generation, IncomingMessage& msg);
  void failPeer(int rank, uint64_t generation, const std::string& why);

  // runtime_calls.cc
  void onServerMessage(const std::shared_ptr<ServerPipe>& server, IncomingMessage& msg);
  // `events` (CUDA build): the request's tensors are ready once they occurred;
  // the function runs with its current streams waiting on them.
  void serveCall(const std::shared_ptr<ServerPipe>& server, const wire::Header& header,
                 c10::IValue args, std::vector<std::shared_ptr<DeviceEvent>> events,
                 const EventTime& arrived);
  // `ctx`: the request's distributed autograd context (0: none).
  void reply(const std::shared_ptr<ServerPipe>& server, uint64_t id, const Future& result,
             const std::string& function, std::optional<Observer::CallToken> observed,
             int64_t ctx = 0);
  // The answer to call `id`: `value`, or `error` when that is set.
  void sendReply(const std::shared_ptr<ServerPipe>& server, uint64_t id, const c10::IValue* value,
                 std::exception_ptr error, const std::string& function,
                 const std::optional<Observer::CallToken>& observed, int64_t ctx);
  void replyError(const std::shared_ptr<ServerPipe>& server, uint64_t id, wire::ErrorKind kind,
                  const std::string& message);
  void writeServer(const std::shared_ptr<ServerPipe>& server,
                   std::shared_ptr<OutgoingMessage> message);
  // Answers a request this worker refused to read (`why`) with a kRefused
  // error, and closes the pipe after kRefusedPipeGrace unless the caller did.
  void refuse(const std::shared_ptr<ServerPipe>& server, const wire::Header& refused,
              const std::string& why);
  // The call waiting for answer `id`, taken out of slots_ or pending_ (none: it
  // timed out or failed already); then completed with the answer `msg`.
  std::optional<Pending> takePending(uint64_t id);
  // Registers call `id` (in slots_ when `mayUseSlot` and its deadline allow,
  // else in pending_); the error to fail it with when the runtime or its pipe
  // refuses it. `alone`: no other call to its peer unanswered, counted only
  // for calls in pending_ (those in slots_ go on a lane, which ignores it).
  std::exception_ptr registerPending(uint64_t id, Pending& pending, Clock::time_point now,
                                     bool mayUseSlot, bool& alone);
  // Whether `m` will most likely go on `writes`' lane (no lock: a hint).
  static bool likelyOnLane(const WriteQueue& writes, const OutgoingMessage& m);
  // Under pendingMu_: a pipe failed; calls made on it from now on fail at once.
  void markPipeFailedLocked(int rank, uint64_t generation, const std::string& why);
  // Under pendingMu_ (for pending_): no call in flight (slots_ scanned).
  bool noCallsPending() {
    return pending_.empty() && slots_.empty();
  }
  void completePending(Pending pending, IncomingMessage& msg);
  // Fails calls taken out of pending_ (a broken pipe, shutdown) with `error`,
  // each recorded by the observer as finished.
  void failPending(std::vector<Pending> calls, const std::exception_ptr& error);
  void timeoutLoop();
  // Runs with `autogradContext` (0: none) as the thread's current context.
  Future runLocal(const Registered& fn, const WorkerInfo& caller, const std::string& name,
                  std::vector<c10::IValue> args, int64_t autogradContext = 0);
  // runLocal for a plain (not async) function: its value in `value`, or what it threw.
  std::exception_ptr runPlain(const Registered& fn, const WorkerInfo& caller,
                              const std::string& name, std::vector<c10::IValue> args,
                              int64_t autogradContext, c10::IValue& value);
  void registerBuiltins();
  std::shared_ptr<detail::RRefHandle> ownedHandle(std::shared_ptr<detail::FutureState> value);

  Runtime& owner_;
  Assignment assignment_;
  RuntimeOptions options_;
  std::uint64_t maxMessageBytes_ = 0;  // options_.maxMessageBytes, or memoryLimitBytes()
  std::vector<WorkerInfo> workers_;
  std::unordered_map<std::string, int> rankByName_;
  int selfRank_ = -1;
  std::shared_ptr<ThreadPool> pool_;
  // Dispatches pipe messages that TensorPipe read on a lane's poller thread
  // (readNext). TensorPipe runs a read's callback on whichever thread drives
  // its loop, also one that only wrote: a lane frame's handler answering on
  // the pipe. That message may wait for the very frame being handled
  // (lane/order.h), which its poller would never come back to deliver. One
  // thread, not the pool, whose threads may all wait for answers that such
  // reads bring; the next read starts once this one was dispatched, so the
  // order holds.
  std::unique_ptr<ThreadPool> readHandoff_;
  std::unordered_map<std::string, Registered> functions_;  // read-only after start()
  std::atomic<bool> started_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> closing_{false};  // graceful shutdown began: refuse new calls
  std::atomic<uint64_t> nextLocalId_{1};

  std::shared_ptr<tensorpipe::Context> context_;
  std::mutex listenerMu_;  // listener_ is replaced when it fails (relisten)
  std::shared_ptr<tensorpipe::Listener> listener_;
  std::vector<std::string> listenUrls_;
  std::string listenHost_, listenPort_;
  Registry registry_;
  std::string descriptorsBlob_;  // our handshake payload

  std::vector<std::unique_ptr<Peer>> peers_;  // by rank

  // The calls in flight: most in slots_, without a lock (pending_slots.h);
  // the rest (a slot still held, a deadline too near for the timeout thread's
  // scan) in pending_, under pendingMu_. A SpinMutex, so that a caller and a
  // poller that meet there rarely meet in a futex (spin_mutex.h).
  PendingSlots<Pending> slots_;
  SpinMutex pendingMu_;
  PendingCalls<Pending> pending_;  // with their deadlines
  // Server pipes that refused a message, kept open (a pipe closes when its last
  // reference goes) until then for the caller to read the answer (refuse());
  // the timeout thread closes them.
  std::multimap<Clock::time_point, std::shared_ptr<tensorpipe::Pipe>> closes_;
  static constexpr std::chrono::seconds kRefusedPipeGrace{10};
  std::condition_variable_any pendingCv_;  // deadlines or closes changed / pending drained
  // When the timeout thread wakes on its own next (under pendingMu_; min():
  // it is not waiting). A call whose deadline is no earlier needs no wake-up:
  // waking it costs a futex call on each side of every call, which was most of
  // a small call's bookkeeping. It never sleeps longer than kTimeoutTick, so an
  // idle runtime never needs waking for a call either.
  std::atomic<Clock::time_point> timeoutWake_{Clock::time_point::min()};
  static constexpr std::chrono::milliseconds kTimeoutTick{100};
  // On a line apart from timeoutWake_ and pendingCv_, which other threads
  // write: every call's fetch_add is a locked instruction and waits for its line.
  alignas(64) std::atomic<uint64_t> nextCallId_{1};
  std::vector<int> unanswered_;  // by peer rank, under pendingMu_: calls in pending_
  std::thread timeoutThread_;
  // Set under pendingMu_; read without it by a call registering in slots_.
  std::atomic<bool> stopTimeouts_{false};
  // By rank, written under pendingMu_: the latest pipe generation failPeer
  // swept, and why. A call made on that pipe but registered after the sweep
  // fails at once rather than waiting (without a timeout: forever) for an
  // answer that cannot come. The generation is atomic: a call registering in
  // slots_ reads it without the lock.
  struct FailedPipe {
    std::atomic<uint64_t> generation{0};  // 0: none (generations start at 1)
    std::string why;
  };
  std::unique_ptr<FailedPipe[]> failedPipes_;

  std::mutex serverMu_;
  std::vector<std::shared_ptr<ServerPipe>> serverPipes_;
  std::atomic<int64_t> serving_{0};  // requests being served here
  // Pipe writes issued and not completed yet (writeUnit). A graceful shutdown
  // waits for them: a tensor's write completes only once the receiver's
  // channel acknowledged it, apart from the response, which may come first.
  std::atomic<int64_t> writesInFlight_{0};

#if RPCJOB_WITH_CUDA
  cuda::DeviceMapTable deviceMaps_;  // validated in start(), completed by handshakes
#endif
  std::mutex laneMu_;
  std::unique_ptr<lane::Poller> poller_;  // the first lane starts it; shutdown stops it
  std::unique_ptr<RRefContext> rrefs_;
  std::unique_ptr<autograd::Container> autograd_;
  std::unique_ptr<class ShutdownCoordinator> shutdown_;
  std::unique_ptr<startup::LeaderBarrier> startBarrier_;  // StartPipes::kLeaderBarrier
  // Last: its watchdog may still fail a pipe (failPeer) until it is gone.
  std::unique_ptr<auth::PipeGate> gate_;  // null: no secret, pipes are not authenticated
};

}  // namespace rpcjob::runtime
