#include "rpcjob/operator/cache.h"

#include <mutex>

namespace rpcjob::kube {

ObjectPtr Cache::get(const std::string& key) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> Cache::list(const std::string& ns) const {
  return listMatching([&](const Object& o) { return ns.empty() || o.metadata.namespace_ == ns; });
}

std::vector<ObjectPtr> Cache::listOwnedBy(const std::string& ownerUid) const {
  return listMatching([&](const Object& o) {
    const OwnerReference* ref = o.metadata.controllerRef();
    return ref != nullptr && ref->uid == ownerUid;
  });
}

std::vector<ObjectPtr> Cache::listMatching(const std::function<bool(const Object&)>& pred) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<ObjectPtr> out;
  for (const auto& [key, obj] : objects_) {
    if (pred(*obj)) out.push_back(obj);
  }
  return out;
}

std::vector<std::string> Cache::keys() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<std::string> out;
  out.reserve(objects_.size());
  for (const auto& [key, obj] : objects_) out.push_back(key);
  return out;
}

size_t Cache::size() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return objects_.size();
}

ObjectPtr Cache::upsert(ObjectPtr obj) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  ObjectPtr& slot = objects_[obj->metadata.key()];
  ObjectPtr old = std::move(slot);
  slot = std::move(obj);
  return old;
}

ObjectPtr Cache::erase(const std::string& key) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return nullptr;
  ObjectPtr old = std::move(it->second);
  objects_.erase(it);
  return old;
}

std::map<std::string, ObjectPtr> Cache::replaceAll(std::map<std::string, ObjectPtr> objects) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  objects_.swap(objects);
  return objects;
}

}  // namespace rpcjob::kube
