#include "rpcjob/runtime/rref.h"

#include "runtime_impl.h"

namespace rpcjob::runtime {
namespace {

std::string idString(const GloballyUniqueId& id) {
  return std::to_string(id.worker) + ":" + std::to_string(id.local);
}

// An RRef inside an IValue: a capsule, which no serializer accepts, so an RRef
// that escaped the fork walk (forkRRefs) fails to send instead of travelling
// without its reference.
struct RRefHolder : torch::CustomClassHolder {
  explicit RRefHolder(RRef r) : rref(std::move(r)) {}
  RRef rref;
};

const RRefHolder* holderOf(const c10::IValue& value) {
  if (!value.isCapsule()) return nullptr;
  return dynamic_cast<const RRefHolder*>(value.toCapsule().get());
}

}  // namespace

// ---- RRefContext

RRefContext::RRefContext(std::shared_ptr<ThreadPool> pool, int selfRank,
                         std::chrono::milliseconds pendingTimeout)
    : pool_(std::move(pool)), selfRank_(selfRank), pendingTimeout_(pendingTimeout) {}

RRefContext::~RRefContext() {
  clear();
}

std::shared_ptr<OwnerEntry> RRefContext::createOwner(const GloballyUniqueId& rref,
                                                     const GloballyUniqueId& fork) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& entry = owners_[rref];
  if (!entry) {
    entry = std::make_shared<OwnerEntry>();
    entry->value = detail::newFutureState(pool_);
  }
  entry->pending = false;  // the creating call arrived: its value completes the entry
  entry->forks.insert(fork);
  return entry;
}

std::shared_ptr<OwnerEntry> RRefContext::findOwner(const GloballyUniqueId& rref) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = owners_.find(rref);
  return it == owners_.end() ? nullptr : it->second;
}

std::shared_ptr<OwnerEntry> RRefContext::awaitLocked(const GloballyUniqueId& rref) {
  auto it = owners_.find(rref);
  if (it != owners_.end()) return it->second;
  // Ids this worker made are created here synchronously: one not in the table
  // was never made (or is gone), so nothing is on its way.
  if (rref.worker == selfRank_) return nullptr;
  auto entry = std::make_shared<OwnerEntry>();
  entry->value = detail::newFutureState(pool_);
  entry->pending = true;
  entry->pendingUntil = Clock::now() + pendingTimeout_;
  owners_[rref] = entry;
  if (!expirer_.joinable() && !stopping_) expirer_ = std::thread([this] { expireLoop(); });
  expirerCv_.notify_all();
  return entry;
}

std::shared_ptr<OwnerEntry> RRefContext::findOrAwaitOwner(const GloballyUniqueId& rref) {
  std::lock_guard<std::mutex> lock(mu_);
  return awaitLocked(rref);
}

bool RRefContext::addForkOrAwait(const GloballyUniqueId& rref, const GloballyUniqueId& fork) {
  std::lock_guard<std::mutex> lock(mu_);
  auto entry = awaitLocked(rref);
  if (!entry) return false;
  entry->forks.insert(fork);
  return true;
}

void RRefContext::expireLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    auto next = Clock::time_point::max();
    const auto now = Clock::now();
    std::vector<std::pair<GloballyUniqueId, std::shared_ptr<OwnerEntry>>> expired;
    for (auto it = owners_.begin(); it != owners_.end();) {
      if (it->second->pending && it->second->pendingUntil <= now) {
        expired.emplace_back(it->first, std::move(it->second));
        it = owners_.erase(it);
        continue;
      }
      if (it->second->pending) next = std::min(next, it->second->pendingUntil);
      ++it;
    }
    if (!expired.empty()) {
      lock.unlock();
      for (auto& [id, entry] : expired) {
        entry->value->fail(std::make_exception_ptr(RpcError(
            ErrorCode::kTimeout, "",
            "RRef " + idString(id) + ": the remote() call creating it did not arrive within " +
                std::to_string(pendingTimeout_.count()) + " ms")));
      }
      expired.clear();
      lock.lock();
      continue;
    }
    if (next == Clock::time_point::max()) {
      expirerCv_.wait(lock);
    } else {
      expirerCv_.wait_until(lock, next);
    }
  }
}

void RRefContext::addFork(const GloballyUniqueId& rref, const GloballyUniqueId& fork,
                          const std::shared_ptr<OwnerEntry>& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = owners_[rref];
  if (!slot) slot = entry;  // an owner-side handle forked an entry no user held
  slot->forks.insert(fork);
}

void RRefContext::deleteFork(const GloballyUniqueId& rref, const GloballyUniqueId& fork) {
  std::shared_ptr<OwnerEntry> released;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = owners_.find(rref);
  if (it == owners_.end()) return;
  it->second->forks.erase(fork);
  if (it->second->forks.empty() && !it->second->pending) {
    released = std::move(it->second);
    owners_.erase(it);
  }
}

size_t RRefContext::ownerCount() {
  std::lock_guard<std::mutex> lock(mu_);
  return owners_.size();
}

void RRefContext::addPendingChild(const GloballyUniqueId& fork,
                                  std::shared_ptr<detail::RRefHandle> parent) {
  std::lock_guard<std::mutex> lock(mu_);
  pendingChildren_[fork] = std::move(parent);
}

void RRefContext::acceptChild(const GloballyUniqueId& fork) {
  std::shared_ptr<detail::RRefHandle> released;  // its destructor may send a message
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pendingChildren_.find(fork);
    if (it == pendingChildren_.end()) return;
    released = std::move(it->second);
    pendingChildren_.erase(it);
  }
}

void RRefContext::clear() {
  std::map<GloballyUniqueId, std::shared_ptr<OwnerEntry>> owners;
  std::map<GloballyUniqueId, std::shared_ptr<detail::RRefHandle>> children;
  std::thread expirer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    owners.swap(owners_);
    children.swap(pendingChildren_);
    stopping_ = true;
    expirer.swap(expirer_);
  }
  expirerCv_.notify_all();
  if (expirer.joinable()) expirer.join();
}

// ---- RRefHandle

namespace detail {
RRefHandle::~RRefHandle() {
  if (isOwner) return;
  auto rt = runtime.lock();
  if (!rt || rt->closed()) return;
  wire::Header h;
  h.type = wire::MessageType::kRRefUserDelete;
  h.hasRRef = true;
  h.rref = rrefId;
  h.fork = forkId;
  CallOptions options;
  options.timeout = std::chrono::milliseconds(-1);
  try {
    rt->sendRequest(ownerRank, h, nullptr, options);
  } catch (...) {
    // Best effort: the owner may be gone; nothing to release then.
  }
}
}  // namespace detail

// ---- RRef

RRef::RRef(std::shared_ptr<detail::RRefHandle> handle) : handle_(std::move(handle)) {}

namespace {
const detail::RRefHandle& checked(const std::shared_ptr<detail::RRefHandle>& handle) {
  if (!handle) throw RpcError(ErrorCode::kInvalidArgument, "", "an empty RRef");
  return *handle;
}
}  // namespace

const std::string& RRef::owner() const {
  return checked(handle_).ownerName;
}
bool RRef::isOwner() const {
  return checked(handle_).isOwner;
}
std::string RRef::id() const {
  return idString(checked(handle_).rrefId);
}
Future RRef::confirmed() const {
  return Future(checked(handle_).confirmed);
}

Future RRef::toHereAsync(std::chrono::milliseconds timeout) const {
  const auto& h = checked(handle_);
  if (h.isOwner) return Future(h.entry->value);
  auto rt = h.runtime.lock();
  if (!rt) {
    return Future::fromError(std::make_exception_ptr(
        RpcError(ErrorCode::kShutdown, h.ownerName, "the runtime is gone")));
  }
  wire::Header fetch;
  fetch.type = wire::MessageType::kRRefFetch;
  fetch.hasRRef = true;
  fetch.rref = h.rrefId;
  fetch.fork = h.forkId;
  CallOptions options;
  options.timeout = timeout;
  Future f = rt->sendRequest(h.ownerRank, fetch, nullptr, options);
  // Keep this reference alive until the fetch is answered.
  f.addInlineCallback([keep = handle_](const Future&) {});
  return f;
}

c10::IValue RRef::toHere(std::chrono::milliseconds timeout) const {
  Future f = toHereAsync(timeout);
  const auto& h = *handle_;
  if (h.isOwner && timeout.count() > 0 && !f.waitFor(timeout)) {
    throw RpcError(ErrorCode::kTimeout, h.ownerName, "RRef " + id() + " has no value yet");
  }
  return f.valueOnStreams();
}

const c10::IValue& RRef::localValue() const {
  const auto& h = checked(handle_);
  if (!h.isOwner) {
    throw RpcError(ErrorCode::kInvalidArgument, h.ownerName,
                   "localValue() is only available on the owner (" + h.ownerName + ")");
  }
  return Future(h.entry->value).value();
}

c10::IValue RRef::toIValue() const {
  checked(handle_);
  return c10::IValue::make_capsule(c10::make_intrusive<RRefHolder>(*this));
}

bool RRef::isRRef(const c10::IValue& value) {
  return holderOf(value) != nullptr;
}

RRef RRef::fromIValue(const c10::IValue& value) {
  const RRefHolder* holder = holderOf(value);
  if (holder == nullptr) {
    throw RpcError(ErrorCode::kInvalidArgument, "",
                   std::string("the value is not an RRef (it is a ") + value.tagKind() + ")");
  }
  return holder->rref;
}

// ---- RuntimeImpl: RRefs owned here, remote(), forks on the wire

std::shared_ptr<detail::RRefHandle> RuntimeImpl::ownedHandle(
    std::shared_ptr<detail::FutureState> value) {
  auto handle = std::make_shared<detail::RRefHandle>();
  handle->runtime = weakSelf_;
  handle->ownerRank = selfRank_;
  handle->ownerName = self().name;
  handle->isOwner = true;
  handle->rrefId = {selfRank_, nextLocalId()};
  handle->entry = std::make_shared<OwnerEntry>();
  handle->entry->value = value;
  // Confirmed once the value exists (or failed to).
  handle->confirmed = detail::newFutureState(pool_);
  Future(value).addInlineCallback([confirmed = handle->confirmed](const Future& done) {
    if (done.hasError()) {
      confirmed->fail(done.error());
    } else {
      confirmed->complete(c10::IValue());
    }
  });
  return handle;
}

RRef RuntimeImpl::makeRRef(c10::IValue value) {
  auto state = detail::newFutureState(pool_);
  state->complete(std::move(value));
  return RRef(ownedHandle(std::move(state)));
}

RRef RuntimeImpl::ownedRRef(const Future& value) {
  auto state = detail::newFutureState(pool_);
  detail::completeFrom(state, value);
  return RRef(ownedHandle(std::move(state)));
}

Future RuntimeImpl::callHere(const std::string& function, std::vector<c10::IValue> args) {
  auto it = functions_.find(function);
  if (it == functions_.end()) {
    return Future::fromError(std::make_exception_ptr(RpcError(
        ErrorCode::kUnknownFunction, self().name, "unknown function or class '" + function + "'")));
  }
  auto state = detail::newFutureState(pool_);
  const Registered& fn = it->second;
  auto task = [this, &fn, function, args = std::move(args), state]() mutable {
    detail::completeFrom(state, runLocal(fn, self(), function, std::move(args)));
  };
  if (!pool_->submit(std::move(task))) {
    state->fail(std::make_exception_ptr(
        RpcError(ErrorCode::kShutdown, self().name, "the runtime is shutting down")));
  }
  return Future(state);
}

RRef RuntimeImpl::remote(const std::string& to, const std::string& function,
                         std::vector<c10::IValue> args, CallOptions options) {
  int rank = rankOf(to);
  // To ourselves: the value is owned here from the start (a user RRef of our
  // own value could not be localValue()d, and forking it leaked).
  if (rank == selfRank_) return ownedRRef(callHere(function, std::move(args)));
  auto handle = std::make_shared<detail::RRefHandle>();
  handle->runtime = weakSelf_;
  handle->ownerRank = rank;
  handle->ownerName = to;
  handle->rrefId = {self().rank, nextLocalId()};
  handle->forkId = {self().rank, nextLocalId()};
  wire::Header h;
  h.type = wire::MessageType::kRemoteCall;
  h.function = function;
  h.hasRRef = true;
  h.rref = handle->rrefId;
  h.fork = handle->forkId;
  std::vector<Forked> forked;
  c10::IValue packed = forkRRefs(c10::ivalue::Tuple::create(std::move(args)), &forked);
  Future f = sendRequest(rank, h, &packed, options);
  unforkIfUnsent(f, forked);
  handle->confirmed = detail::newFutureState(pool_);
  auto confirmed = handle->confirmed;
  f.addInlineCallback([confirmed](const Future& done) {
    if (done.hasError()) {
      confirmed->fail(done.error());
    } else {
      confirmed->complete(c10::IValue());
    }
  });
  return RRef(std::move(handle));
}

RRef RuntimeImpl::rrefFromIValue(const c10::IValue& value) {
  if (RRef::isRRef(value)) return RRef::fromIValue(value);
  return adoptFork(value);
}

c10::IValue RuntimeImpl::forkForWire(const RRef& rref, std::vector<Forked>* made) {
  const auto& handle = rref.handle();
  checked(handle);
  GloballyUniqueId fork{self().rank, nextLocalId()};
  if (handle->isOwner) {
    rrefs_->addFork(handle->rrefId, fork, handle->entry);
  } else {
    // Held until the receiver confirms it registered its fork with the owner.
    rrefs_->addPendingChild(fork, handle);
  }
  if (made != nullptr) made->push_back({handle->rrefId, fork, handle->isOwner});
  std::vector<c10::IValue> fields;
  fields.reserve(7);
  fields.emplace_back(std::string(kRRefTag));
  for (int64_t v : {int64_t{handle->ownerRank}, int64_t{handle->rrefId.worker},
                    static_cast<int64_t>(handle->rrefId.local), int64_t{fork.worker},
                    static_cast<int64_t>(fork.local), int64_t{self().rank}}) {
    fields.emplace_back(v);
  }
  return c10::ivalue::Tuple::create(std::move(fields));
}

bool RuntimeImpl::isWireFork(const c10::IValue& value) {
  if (!value.isTuple()) return false;
  const auto& e = value.toTupleRef().elements();
  return e.size() == 7 && e[0].isString() && e[0].toStringRef() == kRRefTag;
}

RRef RuntimeImpl::adoptFork(const c10::IValue& value) {
  auto bad = [](const std::string& why) {
    return RpcError(ErrorCode::kBadMessage, "", "a malformed RRef fork: " + why);
  };
  if (!isWireFork(value)) throw bad("not an RRef");
  // A copy: indexing the tuple's inline storage directly trips GCC 12's -Warray-bounds.
  std::vector<c10::IValue> e = value.toTupleRef().elements().vec();
  for (size_t i = 1; i < 7; ++i) {
    if (!e[i].isInt()) throw bad("field " + std::to_string(i) + " is not an int");
  }
  const auto workers = static_cast<int64_t>(workers_.size());
  if (e[1].toInt() < 0 || e[1].toInt() >= workers) throw bad("no such owner");
  if (e[6].toInt() < 0 || e[6].toInt() >= workers) throw bad("no such parent");
  int ownerRank = static_cast<int>(e[1].toInt());
  GloballyUniqueId rref{static_cast<int32_t>(e[2].toInt()), static_cast<uint64_t>(e[3].toInt())};
  GloballyUniqueId fork{static_cast<int32_t>(e[4].toInt()), static_cast<uint64_t>(e[5].toInt())};
  int parent = static_cast<int>(e[6].toInt());

  auto handle = std::make_shared<detail::RRefHandle>();
  handle->runtime = weakSelf_;
  handle->ownerRank = ownerRank;
  handle->ownerName = workers_[ownerRank].name;
  handle->rrefId = rref;
  handle->confirmed = detail::newFutureState(pool_);

  auto acceptAtParent = [this, parent, fork] {
    wire::Header accept;
    accept.type = wire::MessageType::kRRefChildAccept;
    accept.hasRRef = true;
    accept.fork = fork;
    sendRequest(parent, accept, nullptr, {});
  };
  if (ownerRank == self().rank) {
    handle->isOwner = true;
    handle->entry = rrefs_->findOrAwaitOwner(rref);
    if (!handle->entry) {
      throw RpcError(ErrorCode::kInvalidArgument, self().name,
                     "RRef " + idString(rref) + " is not owned here");
    }
    if (parent == self().rank) {
      rrefs_->deleteFork(rref, fork);  // we registered it when forking; the owner holds no fork
    } else {
      acceptAtParent();
    }
    handle->confirmed->complete(c10::IValue());
    return RRef(std::move(handle));
  }
  handle->forkId = fork;
  if (parent == ownerRank) {
    handle->confirmed->complete(c10::IValue());  // the owner registered it when forking
    return RRef(std::move(handle));
  }
  wire::Header request;
  request.type = wire::MessageType::kRRefForkRequest;
  request.hasRRef = true;
  request.rref = rref;
  request.fork = fork;
  auto confirmed = handle->confirmed;
  sendRequest(ownerRank, request, nullptr, {})
      .addInlineCallback([confirmed, acceptAtParent](const Future& done) {
        if (done.hasError()) {
          confirmed->fail(done.error());
          return;
        }
        try {
          acceptAtParent();
        } catch (...) {
        }
        confirmed->complete(c10::IValue());
      });
  return RRef(std::move(handle));
}

}  // namespace rpcjob::runtime
