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
// Thread safety: all methods lock.

#include <ATen/core/ivalue.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "future_state.h"
#include "header_codec.h"

namespace rpcjob::runtime {

class RuntimeImpl;
using wire::GloballyUniqueId;

struct OwnerEntry {
  std::shared_ptr<detail::FutureState> value;
  std::set<GloballyUniqueId> forks;
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
  // Owner side.
  std::shared_ptr<OwnerEntry> createOwner(const GloballyUniqueId& rref,
                                          const GloballyUniqueId& fork,
                                          std::shared_ptr<detail::FutureState> value);
  std::shared_ptr<OwnerEntry> findOwner(const GloballyUniqueId& rref);
  void addFork(const GloballyUniqueId& rref, const GloballyUniqueId& fork,
               const std::shared_ptr<OwnerEntry>& entry);
  bool addForkIfOwned(const GloballyUniqueId& rref, const GloballyUniqueId& fork);
  void deleteFork(const GloballyUniqueId& rref, const GloballyUniqueId& fork);
  size_t ownerCount();

  // Parent side.
  void addPendingChild(const GloballyUniqueId& fork, std::shared_ptr<detail::RRefHandle> parent);
  void acceptChild(const GloballyUniqueId& fork);
  void clear();

 private:
  std::mutex mu_;
  std::map<GloballyUniqueId, std::shared_ptr<OwnerEntry>> owners_;
  std::map<GloballyUniqueId, std::shared_ptr<detail::RRefHandle>> pendingChildren_;
};

inline constexpr const char* kRRefTag = "rpcjob.rref";

}  // namespace rpcjob::runtime
