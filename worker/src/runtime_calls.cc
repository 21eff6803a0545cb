// The request path: sending calls, serving them, answering, timeouts.
#include <tensorpipe/tensorpipe.h>

#include <atomic>
#include <string>

#include "autograd/container.h"
#include "call_batch_state.h"
#include "lane/lane.h"
#include "release_later.h"
#include "rpcjob/runtime/runtime.h"
#include "runtime_impl.h"
#include "shutdown.h"
#include "trace/trace.h"

namespace rpcjob::runtime {
namespace {

CallStatus statusOf(const std::exception_ptr& error) {
  if (!error) return CallStatus::kOk;
  try {
    std::rethrow_exception(error);
  } catch (const RpcError& e) {
    switch (e.code()) {
      case ErrorCode::kRemoteException:
        return CallStatus::kRemoteError;
      case ErrorCode::kUnknownFunction:
        return CallStatus::kUnknownFunction;
      case ErrorCode::kTimeout:
        return CallStatus::kTimeout;
      case ErrorCode::kConnection:
        return CallStatus::kConnection;
      default:
        return CallStatus::kOther;
    }
  } catch (...) {
    return CallStatus::kRemoteError;
  }
}

ErrorCode codeOf(wire::ErrorKind kind) {
  switch (kind) {
    case wire::ErrorKind::kUnknownFunction:
      return ErrorCode::kUnknownFunction;
    case wire::ErrorKind::kBadRequest:
    case wire::ErrorKind::kRefused:
      return ErrorCode::kBadMessage;
    case wire::ErrorKind::kShuttingDown:
      return ErrorCode::kShutdown;
    default:
      return ErrorCode::kRemoteException;
  }
}

// Bumped as each runtime is made (registerBuiltins): one made where a
// destroyed one was must not find that one's functions in a thread's cache.
std::atomic<uint64_t> gRuntimesMade{0};

// The function a thread served last, by its entry in the runtime's table
// (whose entries stay put: it is read-only once started, and nothing is ever
// erased). A burst of calls names one function again and again, and hashing
// its name was ~3 % of a busy lane poller's instructions per call.
struct LastFunction {
  const void* table = nullptr;
  uint64_t made = 0;
  const std::string* name = nullptr;  // the entry's key
  const void* entry = nullptr;
};
thread_local LastFunction tLastFunction;  // trivially destructible: no guard per use

// `functions.find(name)`'s entry, or null.
template <typename Table>
const typename Table::mapped_type* findFunction(const Table& functions, const std::string& name) {
  LastFunction& last = tLastFunction;
  const uint64_t made = gRuntimesMade.load(std::memory_order_acquire);
  if (last.table == &functions && last.made == made && *last.name == name) {
    return static_cast<const typename Table::mapped_type*>(last.entry);
  }
  const auto it = functions.find(name);
  if (it == functions.end()) return nullptr;
  last = {&functions, made, &it->first, &it->second};
  return &it->second;
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

Future RuntimeImpl::rpcAsync(const std::string& to, const std::string& function,
                             std::vector<c10::IValue> args, CallOptions options) {
  wire::Header h;
  h.type = wire::MessageType::kCall;
  h.function = function;
  const int rank = rankOf(to);
  std::vector<Forked> forked;
  c10::IValue packed = forkRRefs(c10::ivalue::Tuple::create(std::move(args)), &forked);
  Future sent = sendRequest(rank, std::move(h), &packed, options);
  unforkIfUnsent(sent, forked);
  return sent;
}

Future RuntimeImpl::sendRequest(int to, wire::Header header, const c10::IValue* value,
                                CallOptions options, [[maybe_unused]] bool inverseDeviceMap) {
  trace::point("call.pack");     // to call.send: the request's future and message are made
  const AfterGpuStep afterStep;  // its releases after the request's write (release_later.h)
  // Handed to the Future on return, not copied into it: each copy of a
  // shared_ptr is a locked instruction, and this is every call's path.
  auto state = detail::newFutureState(pool_);
  const std::string& peerName = workers_[to].name;
  if (!started_ || closed_) {
    state->fail(std::make_exception_ptr(
        RpcError(ErrorCode::kShutdown, peerName, "the runtime is not running")));
    return Future(std::move(state));
  }
  // The id first, so that makeMessage encodes the header once, as sent.
  const uint64_t id = nextCallId_.fetch_add(1);
  header.id = id;
  std::shared_ptr<OutgoingMessage> message;
  // A small tensorless call's frame for the lane, made without a message
  // (allocations and a reference count fewer per call).
  const LaneFrameLoan loan(/*wanted=*/true);
  LaneFrame* frame = loan.get();
  try {
    autograd_->onSendRequest(header, value, to);
#if RPCJOB_WITH_CUDA
    const DeviceTargets* targets =
        inverseDeviceMap ? deviceMaps_.responseTargets(to) : deviceMaps_.requestTargets(to);
#else
    const DeviceTargets* targets = nullptr;
#endif
    if (frame == nullptr || value == nullptr ||
        !encodeInline(header, *value, targets, frame->header, frame->payload)) {
      frame = nullptr;
      message = makeMessage(header, value, targets);
    }
  } catch (...) {
    state->fail(std::current_exception());
    return Future(std::move(state));
  }
  auto timeout = options.timeout.count() == 0 ? options_.defaultTimeout : options.timeout;
  trace::point("call.send", id);
  Pending pending;
  pending.future = state;
  pending.peer = to;
  const EventTime now;  // read for the deadline; the observer reuses it
  pending.deadline = timeout.count() > 0 ? now.get() + timeout : Clock::time_point::max();
  if (options_.observer) {
    pending.function = header.function.empty() ? "rpcjob.internal" : header.function;
    pending.observed = options_.observer->callStarted(pending.function, peerName, now);
  }
  uint64_t generation = 0;
  std::shared_ptr<WriteQueue> writes;
  std::shared_ptr<tensorpipe::Pipe> pipe = pipeTo(to, generation, &writes);
  pending.generation = generation;
  bool alone = false;  // no other call to `to` unanswered
  const bool likelyLane =
      writes != nullptr && (frame != nullptr ? writes->laneUp.load(std::memory_order_relaxed)
                                             : likelyOnLane(*writes, *message));
  const std::exception_ptr refused = registerPending(id, pending, now.get(), likelyLane, alone);
  if (refused) {
    state->fail(refused);
    if (options_.observer) {
      options_.observer->callFinished(pending.function, peerName, statusOf(refused),
                                      pending.observed, EventTime());
    }
    return Future(std::move(state));
  }
  if (frame != nullptr) {
    const bool sent = detail::batchingRuntime() == this ? holdFrame(pipe, writes, *frame)
                                                        : sendOnLane(*writes, *frame);
    if (sent) return Future(std::move(state));
    // No lane, or it cannot take it now: the pipe.
    message = laneFrameMessage(frame->header, {frame->payload.data(), frame->payload.size()});
  }
  message->inlinePayload = alone;  // else a burst: keep the batching window (WriteQueue)
  if (detail::batchingRuntime() == this && holdRequest(pipe, writes, message))
    return Future(std::move(state));
  WriteQueue& queue = *writes;  // `writes` itself moves into the keep-alive
  enqueueWrite(pipe, queue, std::move(message), std::move(writes));
  return Future(std::move(state));
}

std::exception_ptr RuntimeImpl::registerPending(uint64_t id, Pending& pending,
                                                Clock::time_point now, bool mayUseSlot,
                                                bool& alone) {
  const int to = pending.peer;
  const uint64_t generation = pending.generation;
  // A slot's deadline is seen by the timeout thread's next scan but one, at
  // the latest: it must not come before that (pending_slots.h).
  const Clock::time_point wake = timeoutWake_.load(std::memory_order_relaxed);
  if (mayUseSlot && (pending.deadline == Clock::time_point::max() ||
                     pending.deadline >= std::max(now, wake) + 2 * kTimeoutTick)) {
    const auto admitted = [&] {
      return !stopTimeouts_.load() && failedPipes_[to].generation.load() < generation;
    };
    if (slots_.tryInsert(id, pending.deadline, pending, admitted) ==
        PendingSlots<Pending>::Insert::kOk) {
      return nullptr;
    }
    // Held by an older call, or refused: the locked table, which says why.
  }
  std::exception_ptr refused;
  bool wakeTimeouts = false;
  {
    std::lock_guard<SpinMutex> lock(pendingMu_);
    const std::string& peerName = workers_[to].name;
    if (stopTimeouts_) {
      // shutdown() drained the calls after our check of closed_: nobody would
      // ever complete or time out this call.
      refused = std::make_exception_ptr(
          RpcError(ErrorCode::kShutdown, peerName, "the runtime is not running"));
    } else if (failedPipes_[to].generation >= generation) {
      // The pipe failed between pipeTo() and here: failPeer's sweep missed us.
      refused = std::make_exception_ptr(
          RpcError(ErrorCode::kConnection, peerName,
                   "connection to worker '" + peerName + "' failed: " + failedPipes_[to].why));
    } else {
      // Read again under the lock, under which the timeout thread sets it and
      // reads pending_: the value above may be from before its last wake-up.
      wakeTimeouts = pending.deadline != Clock::time_point::max() &&
                     pending.deadline < timeoutWake_.load(std::memory_order_relaxed);
      const Clock::time_point deadline = pending.deadline;
      pending_.insert(id, deadline, std::move(pending));
      alone = unanswered_[to]++ == 0;
    }
  }
  if (wakeTimeouts) pendingCv_.notify_all();
  return refused;
}

void RuntimeImpl::markPipeFailedLocked(int rank, uint64_t generation, const std::string& why) {
  failedPipes_[rank].why = why;
  failedPipes_[rank].generation.store(generation);  // sequentially consistent: pending_slots.h
}

std::optional<RuntimeImpl::Pending> RuntimeImpl::takePending(uint64_t id) {
  std::optional<Pending> pending = slots_.take(id);
  if (!pending) {
    std::lock_guard<SpinMutex> lock(pendingMu_);
    pending = pending_.take(id);
    if (!pending) return std::nullopt;  // timed out or failed already
    unanswered_[pending->peer]--;
  }
  // Only a graceful shutdown waits for the calls to drain (ShutdownCoordinator::run
  // sets closing_ first): anyone else would wake the timeout thread for nothing.
  if (closing_.load()) {
    std::lock_guard<SpinMutex> lock(pendingMu_);
    pendingCv_.notify_all();  // the waiter checks noCallsPending()
  }
  return pending;
}

void RuntimeImpl::completePending(Pending pending, IncomingMessage& msg) {
  const std::string& peerName = workers_[pending.peer].name;
  std::exception_ptr error;
  c10::IValue value;
  if (msg.header.type == wire::MessageType::kError) {
    error = std::make_exception_ptr(RpcError(codeOf(msg.header.errorKind), peerName,
                                             "worker '" + peerName + "': " + msg.header.error));
  } else {
    try {
      value = adoptRRefs(
          autograd_->onReceive(msg.header, pending.peer, decodeValue(msg), /*request=*/false));
    } catch (...) {
      error = std::current_exception();
    }
  }
  // Recorded before the future completes: its callbacks (the caller's code)
  // are not part of the call's latency, and whoever waits on it finds the call
  // counted.
  if (options_.observer) {
    const EventTime unknown;
    options_.observer->callFinished(pending.function, peerName, statusOf(error), pending.observed,
                                    msg.arrived != nullptr ? *msg.arrived : unknown);
  }
  trace::point("call.complete", msg.header.id);
  if (error) {
    pending.future->fail(error);
    return;
  }
  try {
    if (!msg.events.empty()) {  // CUDA: one per device the value lives on
      std::lock_guard<std::mutex> lock(pending.future->mu);
      pending.future->events = std::move(msg.events);
    }
    pending.future->complete(std::move(value));
  } catch (...) {
    pending.future->fail(std::current_exception());
  }
}

void RuntimeImpl::failPending(std::vector<Pending> calls, const std::exception_ptr& error) {
  const CallStatus status = statusOf(error);
  const EventTime now;  // one read for all of them, and only for an observer
  for (auto& call : calls) {
    if (options_.observer) {
      options_.observer->callFinished(call.function, workers_[call.peer].name, status,
                                      call.observed, now);
    }
    call.future->fail(error);
  }
}

void RuntimeImpl::timeoutLoop() {
  std::unique_lock<SpinMutex> lock(pendingMu_);
  // Also lets go of what release_later.h held too long, when this thread wakes.
  Clock::time_point staleCheck = Clock::time_point::min();
  while (!stopTimeouts_) {
    const auto now = Clock::now();
    if (!closes_.empty() && closes_.begin()->first <= now) {
      std::shared_ptr<tensorpipe::Pipe> pipe = std::move(closes_.begin()->second);
      closes_.erase(closes_.begin());
      lock.unlock();
      pipe->close();
      pipe.reset();
      lock.lock();
      continue;
    }
    std::vector<Pending> expired;
    while (std::optional<Pending> late = pending_.takeExpired(now)) {
      unanswered_[late->peer]--;
      expired.push_back(std::move(*late));
    }
    const bool holding = expired.empty() && deferredReleases().held() > 0;
    if (holding && now >= staleCheck) {
      staleCheck = now + DeferredReleases::kMaxAge / 2;
      lock.unlock();  // destructors run there
      releaseStale();
      lock.lock();
      continue;  // anything may have changed meanwhile
    }
    lock.unlock();
    // The slots' calls: a scan without the lock (pending_slots.h).
    const Clock::time_point slotsNext = slots_.takeExpired(now, expired);
    for (Pending& pending : expired) {
      const std::string& peerName = workers_[pending.peer].name;
      pending.future->fail(std::make_exception_ptr(
          RpcError(ErrorCode::kTimeout, peerName, "call to worker '" + peerName + "' timed out")));
      if (options_.observer) {
        options_.observer->callFinished(pending.function, peerName, CallStatus::kTimeout,
                                        pending.observed, EventTime());
      }
    }
    lock.lock();
    if (!expired.empty()) {
      pendingCv_.notify_all();  // a graceful shutdown may wait for the calls to drain
      continue;
    }
    auto next = std::min({now + kTimeoutTick, pending_.nextDeadline(), slotsNext});
    if (holding) next = std::min(next, staleCheck);
    if (!closes_.empty()) next = std::min(next, closes_.begin()->first);
    timeoutWake_.store(next, std::memory_order_relaxed);
    pendingCv_.wait_until(lock, next);
    timeoutWake_.store(Clock::time_point::min(), std::memory_order_relaxed);
  }
}

// ---- serving

void RuntimeImpl::onServerMessage(const std::shared_ptr<ServerPipe>& server, IncomingMessage& msg) {
  const wire::Header& h = msg.header;
  switch (h.type) {
    case wire::MessageType::kHello: {
#if RPCJOB_WITH_CUDA
      if (server->callerRank >= 0) {  // the caller's device map to us: responses invert it
        wire::ChannelDescriptors caller;
        if (wire::decodeChannelDescriptors(msg.payload.data(), msg.payload.size(), caller)
                .empty()) {
          deviceMaps_.onCallerDescriptors(workers_[server->callerRank].name, caller);
        }
      }
#endif
      wire::Header reply;
      reply.type = wire::MessageType::kHelloReply;
      writeServer(server, makeRawMessage(reply, descriptorsBlob_));
      return;
    }
    case wire::MessageType::kLaneOffer:
      onLaneOffer(server, msg);
      return;
    case wire::MessageType::kLaneStart:  // ordered (lane/order.h): nothing more to do
      return;
    case wire::MessageType::kCall:
    case wire::MessageType::kRemoteCall: {
      c10::IValue args;
      try {
        args = adoptRRefs(
            autograd_->onReceive(h, server->callerRank, decodeValue(msg), /*request=*/true));
      } catch (const std::exception& e) {
        replyError(server, h.id, wire::ErrorKind::kBadRequest, e.what());
        return;
      }
      const EventTime unknown;
      serveCall(server, h, std::move(args), std::move(msg.events),
                msg.arrived != nullptr ? *msg.arrived : unknown);
      return;
    }
    case wire::MessageType::kRRefFetch: {
      try {
        autograd_->onReceive(h, server->callerRank, c10::IValue(), true);  // joins its context
      } catch (const std::exception& e) {
        replyError(server, h.id, wire::ErrorKind::kBadRequest, e.what());
        return;
      }
      auto entry = rrefs_->findOrAwaitOwner(h.rref);
      if (!entry) {
        replyError(server, h.id, wire::ErrorKind::kBadRequest,
                   "no RRef " + std::to_string(h.rref.worker) + ":" + std::to_string(h.rref.local) +
                       " on worker '" + self().name + "'");
        return;
      }
      serving_++;
      reply(server, h.id, Future(entry->value), kBuiltinOwnerRRefCount, std::nullopt,
            h.hasAutograd ? h.autogradContext : 0);
      return;
    }
    case wire::MessageType::kRRefUserDelete:
      rrefs_->deleteFork(h.rref, h.fork);
      serving_++;
      reply(server, h.id, Future::fromValue(c10::IValue()), "", std::nullopt);
      return;
    case wire::MessageType::kRRefForkRequest:
      if (!rrefs_->addForkOrAwait(h.rref, h.fork)) {
        replyError(server, h.id, wire::ErrorKind::kBadRequest, "fork of an RRef not owned here");
        return;
      }
      serving_++;
      reply(server, h.id, Future::fromValue(c10::IValue()), "", std::nullopt);
      return;
    case wire::MessageType::kRRefChildAccept:
      rrefs_->acceptChild(h.fork);
      serving_++;
      reply(server, h.id, Future::fromValue(c10::IValue()), "", std::nullopt);
      return;
    default:
      replyError(server, h.id, wire::ErrorKind::kBadRequest, "unexpected message type");
  }
}

void RuntimeImpl::serveCall(const std::shared_ptr<ServerPipe>& server, const wire::Header& header,
                            c10::IValue args, std::vector<std::shared_ptr<DeviceEvent>> events,
                            const EventTime& arrived) {
  bool remoteCall = header.type == wire::MessageType::kRemoteCall;
  std::shared_ptr<detail::FutureState> owned;
  if (remoteCall) {
    // Register the fork now, on the read thread, before any later message from
    // the same user (its delete, for one) can be read. The owner keeps the value;
    // the caller only learns that it was created (or why not).
    owned = rrefs_->createOwner(header.rref, header.fork)->value;
  }
  auto refuse = [&](wire::ErrorKind kind, const std::string& message) {
    if (owned) owned->fail(std::make_exception_ptr(RpcError(codeOf(kind), self().name, message)));
    replyError(server, header.id, kind, message);
  };
  const Registered* found = findFunction(functions_, header.function);
  if (found == nullptr) {
    refuse(wire::ErrorKind::kUnknownFunction,
           "unknown function or class '" + header.function + "'");
    return;
  }
  if (!args.isTuple()) {
    refuse(wire::ErrorKind::kBadRequest, "arguments are not a tuple");
    return;
  }
  const Registered& fn = *found;
  const WorkerInfo& caller = callerOf(server->callerRank);
  std::optional<Observer::CallToken> observed;
  if (options_.observer) {
    observed = options_.observer->serverCallStarted(header.function, caller.name, arrived);
  }
  serving_++;
  std::vector<c10::IValue> argv = args.toTupleRef().elements().vec();
  const int64_t autogradContext = header.hasAutograd ? header.autogradContext : 0;
  trace::point(fn.options.runInline ? "serve.inline" : "serve.submit", header.id);
  if (fn.options.runInline && !fn.async && !owned) {
    // The common small call: a plain function's value answered as it is,
    // without a Future (an allocation, a mutex and a condition variable) or
    // the closures below in between.
    for (auto& e : events) e->blockCurrentStream();
    c10::IValue value;
    std::exception_ptr error =
        runPlain(fn, caller, header.function, std::move(argv), autogradContext, value);
    sendReply(server, header.id, error ? nullptr : &value, error, header.function, observed,
              autogradContext);
    return;
  }
  auto respond = [this, server, id = header.id, name = header.function, observed, owned,
                  autogradContext](Future result) {
    if (owned) {
      result.addInlineCallback([owned](const Future& done) {
        if (done.hasError()) {
          owned->fail(done.error());
        } else {
          owned->complete(done.value());
        }
      });
      if (result.isDone() && !result.hasError()) result = Future::fromValue(c10::IValue());
      if (!result.isDone()) {
        auto ack = detail::newFutureState(pool_);
        result.addInlineCallback([ack](const Future& done) {
          if (done.hasError()) {
            ack->fail(done.error());
          } else {
            ack->complete(c10::IValue());
          }
        });
        result = Future(ack);
      }
    }
    reply(server, id, result, name, observed, autogradContext);
  };
  if (fn.options.runInline) {
    for (auto& e : events) e->blockCurrentStream();
    respond(runLocal(fn, caller, header.function, std::move(argv), autogradContext));
    return;
  }
  auto name = header.function;
  auto task = [this, &fn, &caller, name, argv = std::move(argv), respond, events, autogradContext,
               id = header.id]() mutable {
    trace::point("serve.run", id);
    for (auto& e : events) e->blockCurrentStream();  // this thread's current streams
    respond(runLocal(fn, caller, name, std::move(argv), autogradContext));
  };
  if (!pool_->submit(task)) {
    serving_--;
    refuse(wire::ErrorKind::kShuttingDown, "worker is shutting down");
  }
}

const WorkerInfo& RuntimeImpl::callerOf(int callerRank) const {
  static const WorkerInfo kUnknown{"?", -1};
  return callerRank >= 0 ? workers_[callerRank] : kUnknown;
}

std::exception_ptr RuntimeImpl::runPlain(const Registered& fn, const WorkerInfo& caller,
                                         const std::string& name, std::vector<c10::IValue> args,
                                         int64_t autogradContext, c10::IValue& value) {
  CallInfo info{caller, name, owner_};
  autograd::CurrentContextScope inContext(autogradContext);
  try {
    value = fn.fn(info, std::move(args));
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

Future RuntimeImpl::runLocal(const Registered& fn, const WorkerInfo& caller,
                             const std::string& name, std::vector<c10::IValue> args,
                             int64_t autogradContext) {
  CallInfo info{caller, name, owner_};
  autograd::CurrentContextScope inContext(autogradContext);
  try {
    if (fn.async) return fn.async(info, std::move(args));
    return Future::fromValue(fn.fn(info, std::move(args)));
  } catch (...) {
    return Future::fromError(std::current_exception());
  }
}

void RuntimeImpl::reply(const std::shared_ptr<ServerPipe>& server, uint64_t id,
                        const Future& result, const std::string& function,
                        std::optional<Observer::CallToken> observed, int64_t ctx) {
  // An inline function's result is done already: answered here, without the
  // callback (and its allocation) that a later result needs.
  if (result.isDone()) {
    const bool failed = result.hasError();
    sendReply(server, id, failed ? nullptr : &result.value(), failed ? result.error() : nullptr,
              function, observed, ctx);
    return;
  }
  // A later result belongs to the application, which may complete it after
  // this runtime closed or was destroyed: the caller was failed by then, and
  // the answer is dropped.
  result.addInlineCallback(
      [weak = weakSelf_, server, id, function, observed, ctx](const Future& done) {
        const auto self = weak.lock();
        if (!self || self->closed_) return;
        const bool failed = done.hasError();
        self->sendReply(server, id, failed ? nullptr : &done.value(),
                        failed ? done.error() : nullptr, function, observed, ctx);
      });
}

void RuntimeImpl::sendReply(const std::shared_ptr<ServerPipe>& server, uint64_t id,
                            const c10::IValue* value, std::exception_ptr error,
                            const std::string& function,
                            const std::optional<Observer::CallToken>& observed, int64_t ctx) {
  trace::point("serve.reply", id);
  const AfterGpuStep afterStep;  // its releases after the answer's write (release_later.h)
  wire::Header h;
  h.id = id;
  std::shared_ptr<OutgoingMessage> message;
  // A small tensorless answer on a lane: a frame, as a small call's request
  // (sendRequest), without a message allocated and freed per answer.
  const LaneFrameLoan loan(server->writes.laneUp.load(std::memory_order_relaxed));
  LaneFrame* frame = loan.get();
  if (!error) {
    h.type = wire::MessageType::kResponse;
    std::vector<Forked> forked;
    try {
      const c10::IValue sent = forkRRefs(*value, &forked);
      autograd_->onSendResponse(ctx, h, sent);  // records a send when it needs one
#if RPCJOB_WITH_CUDA
      // An unknown caller (no rank) gets the name's entry, as before.
      const DeviceTargets* targets = deviceMaps_.responseTargets(server->callerRank);
      std::shared_ptr<const DeviceTargets> unknown;
      if (targets == nullptr) {
        unknown = deviceMaps_.forResponse(callerOf(server->callerRank).name);
        targets = unknown.get();
      }
#else
      const DeviceTargets* targets = nullptr;
#endif
      if (frame == nullptr || !encodeInline(h, sent, targets, frame->header, frame->payload)) {
        frame = nullptr;
        message = makeMessage(h, &sent, targets);
      }
    } catch (...) {
      unfork(forked);
      error = std::current_exception();
    }
  }
  if (!error && frame != nullptr) {
    if (sendOnLane(server->writes, *frame)) {
      if (options_.observer && !function.empty() && observed) {
        ServedCall call{function, server->callerRank, CallStatus::kOk, *observed};
        if (lane::heldInTurn()) {
          deferServed(std::move(call));
        } else {
          recordServed(call, EventTime());
        }
      }
      if (--serving_ == 0) shutdown_->onIdle();
      return;
    }
    message = laneFrameMessage(frame->header, {frame->payload.data(), frame->payload.size()});
  }
  if (error) {
    h.type = wire::MessageType::kError;
    h.errorKind = wire::ErrorKind::kRemoteException;
    h.error = describe(error);
    message = makeMessage(h, nullptr);
  }
  // Finished when the response is written (flushWrites): recording it here
  // would delay the write, which TensorPipe runs after this callback returns.
  if (options_.observer && !function.empty() && observed) {
    message->served = ServedCall{function, server->callerRank, statusOf(error), *observed};
  }
  writeServer(server, std::move(message));
  if (--serving_ == 0) shutdown_->onIdle();
}

void RuntimeImpl::replyError(const std::shared_ptr<ServerPipe>& server, uint64_t id,
                             wire::ErrorKind kind, const std::string& message) {
  wire::Header h;
  h.type = wire::MessageType::kError;
  h.id = id;
  h.errorKind = kind;
  h.error = message;
  writeServer(server, makeMessage(h, nullptr));
}

void RuntimeImpl::refuse(const std::shared_ptr<ServerPipe>& server, const wire::Header& refused,
                         const std::string& why) {
  // The refused message's bytes are still on their way and cannot be skipped,
  // so this pipe is read no more. Closing it at once would race the answer
  // (the caller's side fails on the first of the pipe's connections to see the
  // close), so the caller closes it when the answer arrives; a caller that does
  // not gets it closed after a grace period.
  wire::Header h;
  h.type = wire::MessageType::kError;
  h.id = refused.id;
  h.errorKind = wire::ErrorKind::kRefused;
  h.error = "refused the message: " + why;
  writeServer(server, makeMessage(h, nullptr));
  {
    std::lock_guard<SpinMutex> lock(pendingMu_);
    if (!stopTimeouts_) {
      closes_.emplace(Clock::now() + kRefusedPipeGrace, server->pipe);
      pendingCv_.notify_all();
      return;
    }
  }
  server->pipe->close();  // shutting down: the timeout thread is gone
}

void RuntimeImpl::writeServer(const std::shared_ptr<ServerPipe>& server,
                              std::shared_ptr<OutgoingMessage> message) {
  // A failed response means the caller went away; its side fails the call.
  enqueueWrite(server->pipe, server->writes, std::move(message), server);
}

void RuntimeImpl::registerBuiltins() {
  gRuntimesMade.fetch_add(1);  // before this runtime serves anything (findFunction)
  FunctionOptions inlineFn{true};
  functions_[kBuiltinPing] = {
      [](const CallInfo&, std::vector<c10::IValue>) { return c10::IValue(); }, nullptr, inlineFn};
  functions_[kBuiltinEcho] = {[](const CallInfo&, std::vector<c10::IValue> args) {
                                if (args.size() == 1) return std::move(args[0]);
                                return c10::IValue(c10::ivalue::Tuple::create(std::move(args)));
                              },
                              nullptr, inlineFn};
  functions_[kBuiltinOwnerRRefCount] = {
      [this](const CallInfo&, std::vector<c10::IValue>) {
        return c10::IValue(static_cast<int64_t>(rrefs_->ownerCount()));
      },
      nullptr, inlineFn};
  functions_[kBuiltinShutdownJoin] = {nullptr,
                                      [this](const CallInfo& info, std::vector<c10::IValue>) {
                                        return shutdown_->join(info.caller.rank);
                                      },
                                      inlineFn};
  for (auto& b : autograd_->builtins()) {
    functions_[b.name] = {std::move(b.fn), std::move(b.async), FunctionOptions{b.runInline}};
  }
}

}  // namespace rpcjob::runtime
