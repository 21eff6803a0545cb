#pragma once
// The informer's store: the latest version of every object of one resource,
// keyed "namespace/name" (or "name"). Readers get shared_ptrs to immutable
// objects, so a reader's snapshot stays valid while the informer updates.
//
// Thread-safety: all methods may be called from any thread.

#include <functional>
#include <map>
#include <shared_mutex>
#include <string>
#include <vector>

#include "rpcjob/operator/object.h"

namespace rpcjob::kube {

class Cache {
 public:
  ObjectPtr get(const std::string& key) const;  // nullptr when absent
  // Sorted by key. ns empty: all namespaces.
  std::vector<ObjectPtr> list(const std::string& ns = "") const;
  // Objects whose controller owner reference has this UID (a job's pods, ...).
  std::vector<ObjectPtr> listOwnedBy(const std::string& ownerUid) const;
  std::vector<ObjectPtr> listMatching(const std::function<bool(const Object&)>& pred) const;
  std::vector<std::string> keys() const;
  size_t size() const;

  // Writes (the informer's). upsert/erase return the previous object or nullptr.
  ObjectPtr upsert(ObjectPtr obj);
  ObjectPtr erase(const std::string& key);
  // Replaces everything; returns the previous contents.
  std::map<std::string, ObjectPtr> replaceAll(std::map<std::string, ObjectPtr> objects);

 private:
  mutable std::shared_mutex mu_;
  std::map<std::string, ObjectPtr> objects_;
};

}  // namespace rpcjob::kube
