#include "rpcjob/runtime/rref.h"

#include "runtime_impl.h"

namespace rpcjob::runtime {

// ---- RRefContext

std::shared_ptr<OwnerEntry> RRefContext::createOwner(const GloballyUniqueId& rref,
                                                     const GloballyUniqueId& fork,
                                                     std::shared_ptr<detail::FutureState> value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& entry = owners_[rref];
  if (!entry) entry = std::make_shared<OwnerEntry>();
  entry->value = std::move(value);
  entry->forks.insert(fork);
  return entry;
}

std::shared_ptr<OwnerEntry> RRefContext::findOwner(const GloballyUniqueId& rref) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = owners_.find(rref);
  return it == owners_.end() ? nullptr : it->second;
}

void RRefContext::addFork(const GloballyUniqueId& rref, const GloballyUniqueId& fork,
                          const std::shared_ptr<OwnerEntry>& entry) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = owners_[rref];
  if (!slot) slot = entry;  // an owner-side handle forked an entry no user held
  slot->forks.insert(fork);
}

bool RRefContext::addForkIfOwned(const GloballyUniqueId& rref, const GloballyUniqueId& fork) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = owners_.find(rref);
  if (it == owners_.end()) return false;
  it->second->forks.insert(fork);
  return true;
}

void RRefContext::deleteFork(const GloballyUniqueId& rref, const GloballyUniqueId& fork) {
  std::shared_ptr<OwnerEntry> released;  // freed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = owners_.find(rref);
  if (it == owners_.end()) return;
  it->second->forks.erase(fork);
  if (it->second->forks.empty()) {
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    owners.swap(owners_);
    children.swap(pendingChildren_);
  }
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

const std::string& RRef::owner() const {
  return handle_->ownerName;
}
bool RRef::isOwner() const {
  return handle_->isOwner;
}
std::string RRef::id() const {
  return std::to_string(handle_->rrefId.worker) + ":" + std::to_string(handle_->rrefId.local);
}
Future RRef::confirmed() const {
  return Future(handle_->confirmed);
}

Future RRef::toHereAsync() const {
  if (handle_->isOwner) {
    auto entry = handle_->entry;
    return Future(entry->value);
  }
  auto rt = handle_->runtime.lock();
  if (!rt) {
    return Future::fromError(std::make_exception_ptr(
        RpcError(ErrorCode::kShutdown, handle_->ownerName, "the runtime is gone")));
  }
  wire::Header h;
  h.type = wire::MessageType::kRRefFetch;
  h.hasRRef = true;
  h.rref = handle_->rrefId;
  h.fork = handle_->forkId;
  // Keep this reference alive until the fetch is answered.
  auto keep = handle_;
  Future f = rt->sendRequest(handle_->ownerRank, h, nullptr, {});
  f.addInlineCallback([keep](const Future&) {});
  return f;
}

c10::IValue RRef::toHere() const {
  return toHereAsync().value();
}

const c10::IValue& RRef::localValue() const {
  if (!handle_->isOwner) {
    throw RpcError(ErrorCode::kInvalidArgument, handle_->ownerName,
                   "localValue() is only available on the owner (" + handle_->ownerName + ")");
  }
  return Future(handle_->entry->value).value();
}

c10::IValue RRef::toIValue() const {
  auto rt = handle_->runtime.lock();
  if (!rt) throw RpcError(ErrorCode::kShutdown, handle_->ownerName, "the runtime is gone");
  GloballyUniqueId fork{rt->self().rank, rt->nextLocalId()};
  if (handle_->isOwner) {
    rt->rrefs().addFork(handle_->rrefId, fork, handle_->entry);
  } else {
    // Held until the receiver confirms it registered its fork with the owner.
    rt->rrefs().addPendingChild(fork, handle_);
  }
  std::vector<c10::IValue> fields;
  fields.reserve(7);
  fields.emplace_back(std::string(kRRefTag));
  for (int64_t v : {int64_t{handle_->ownerRank}, int64_t{handle_->rrefId.worker},
                    static_cast<int64_t>(handle_->rrefId.local), int64_t{fork.worker},
                    static_cast<int64_t>(fork.local), int64_t{rt->self().rank}}) {
    fields.emplace_back(v);
  }
  return c10::ivalue::Tuple::create(std::move(fields));
}

// ---- RuntimeImpl: remote() and receiving forks

RRef RuntimeImpl::remote(const std::string& to, const std::string& function,
                         std::vector<c10::IValue> args, CallOptions options) {
  int rank = rankOf(to);
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
  c10::IValue packed = c10::ivalue::Tuple::create(std::move(args));
  Future f = sendRequest(rank, h, &packed, options);
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
  auto bad = [] {
    return RpcError(ErrorCode::kInvalidArgument, "", "the value is not an RRef from toIValue()");
  };
  if (!value.isTuple()) throw bad();
  // A copy: indexing the tuple's inline storage directly trips GCC 12's -Warray-bounds.
  std::vector<c10::IValue> e = value.toTupleRef().elements().vec();
  if (e.size() != 7 || !e[0].isString() || e[0].toStringRef() != kRRefTag) throw bad();
  for (size_t i = 1; i < 7; ++i) {
    if (!e[i].isInt()) throw bad();
  }
  int ownerRank = static_cast<int>(e[1].toInt());
  if (ownerRank < 0 || ownerRank >= static_cast<int>(workers_.size())) throw bad();
  GloballyUniqueId rref{static_cast<int32_t>(e[2].toInt()), static_cast<uint64_t>(e[3].toInt())};
  GloballyUniqueId fork{static_cast<int32_t>(e[4].toInt()), static_cast<uint64_t>(e[5].toInt())};
  int parent = static_cast<int>(e[6].toInt());
  if (parent < 0 || parent >= static_cast<int>(workers_.size())) throw bad();

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
    handle->entry = rrefs_->findOwner(rref);
    if (!handle->entry) {
      throw RpcError(ErrorCode::kInvalidArgument, self().name,
                     "RRef " + std::to_string(rref.worker) + ":" + std::to_string(rref.local) +
                         " is not owned here");
    }
    if (parent == self().rank) {
      rrefs_->deleteFork(rref, fork);  // we registered it in toIValue(); the owner holds no fork
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
