#pragma once
// Reference counting of RRefs, PyTorch's protocol:
//  - the owner keeps an OwnerEntry per RRef with the set of live user forks;
//  - remote() registers the caller's fork when the owner receives the call;
//  - a fork made by a non-owner parent is registered by its receiver with the
//    owner (kRRefForkRequest), and only then (kRRefChildAccept) does the parent
//    drop the reference it held for the child ("pending children");
//  - a user fork that is destroyed sends kRRefUserDelete; the owner drops the
//    entry once no fork is left. Messages from one worker to the owner travel on
//    one pipe in order and are applied on the read thread, so a delete can never
//    overtake the registration of its own fork.
//  - a fork request or fetch from a third worker can overtake the remote() call
//    that creates the value (different pipes): the owner then makes a pending
//    entry the call completes when it arrives (PyTorch's getOwnerRRef waits the
//    same way); one the call never reaches within `pendingTimeout` fails.
// An RRef owned here that was never forked (a local RRef, a self-remote) has
// no entry in the table: its handles hold the OwnerEntry; forking adds it.
// Thread safety: all methods lock.

#include <ATen/core/ivalue.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "future_state.h"
#include "header_codec.h"

namespace rpcjob::runtime {

class RuntimeImpl;
class ThreadPool;
using wire::GloballyUniqueId;

struct OwnerEntry {
  std::shared_ptr<detail::FutureState> value;
  std::set<GloballyUniqueId> forks;
  // Made by a fork request or fetch before the creating call arrived: expires
  // at `pendingUntil` unless the call comes.
  bool pending = false;
  std::chrono::steady_clock::time_point pendingUntil;
};

namespace detail {
class RRefHandle {
 public:
  ~RRefHandle();
  std::weak_ptr<RuntimeImpl> runtime;
  int ownerRank = -1;
  std::string ownerName;
  bool isOwner = false;
  GloballyUniqueId rrefId;
  GloballyUniqueId forkId;  // users only
  std::shared_ptr<FutureState> confirmed;
  std::shared_ptr<OwnerEntry> entry;  // owner only
};
}  // namespace detail

class RRefContext {
 public:
  RRefContext(std::shared_ptr<ThreadPool> pool, int selfRank,
              std::chrono::milliseconds pendingTimeout);
  ~RRefContext();

  // Owner side. The entry of a remote() call (a pending one it completes, or
  // a new one with a fresh value state).
  std::shared_ptr<OwnerEntry> createOwner(const GloballyUniqueId& rref,
                                          const GloballyUniqueId& fork);
  std::shared_ptr<OwnerEntry> findOwner(const GloballyUniqueId& rref);
  // findOwner, or, for an RRef another worker creates here, a pending entry
  // that waits for its creating call (null when this worker made the id: it
  // cannot be on its way).
  std::shared_ptr<OwnerEntry> findOrAwaitOwner(const GloballyUniqueId& rref);
  void addFork(const GloballyUniqueId& rref, const GloballyUniqueId& fork,
               const std::shared_ptr<OwnerEntry>& entry);
  // A user's fork request: false for an id this worker made and does not own.
  bool addForkOrAwait(const GloballyUniqueId& rref, const GloballyUniqueId& fork);
  void deleteFork(const GloballyUniqueId& rref, const GloballyUniqueId& fork);
  size_t ownerCount();

  // Parent side.
  void addPendingChild(const GloballyUniqueId& fork, std::shared_ptr<detail::RRefHandle> parent);
  void acceptChild(const GloballyUniqueId& fork);
  void clear();

 private:
  std::shared_ptr<OwnerEntry> awaitLocked(const GloballyUniqueId& rref);
  void expireLoop();

  std::shared_ptr<ThreadPool> pool_;
  const int selfRank_;
  const std::chrono::milliseconds pendingTimeout_;
  std::mutex mu_;
  std::map<GloballyUniqueId, std::shared_ptr<OwnerEntry>> owners_;
  std::map<GloballyUniqueId, std::shared_ptr<detail::RRefHandle>> pendingChildren_;
  // Expires pending entries; started with the first one.
  std::thread expirer_;
  std::condition_variable expirerCv_;
  bool stopping_ = false;
};

inline constexpr const char* kRRefTag = "rpcjob.rref";

}  // namespace rpcjob::runtime
