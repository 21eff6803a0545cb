#pragma once
// An informer keeps a Cache of one resource in step with the API server: list,
// then watch from the list's resourceVersion (with bookmarks), applying each
// event to the cache and calling the handlers.
//
//  - A watch that ends normally (the server's timeoutSeconds, randomised in
//    [watchTimeout, 2 * watchTimeout) so informers do not restart together) or
//    goes idle is restarted at once from the last resourceVersion seen.
//  - 410 Gone (the version is too old for the server) means relist: the new list
//    replaces the cache, and handlers see the difference (adds, updates,
//    deletes of objects that vanished meanwhile).
//  - Any other failure (server down, 5xx, 403, undecodable event) waits a
//    Backoff delay (with jitter) and tries again; an undecodable event also
//    forces a relist, since an event was lost.
//
// Handlers run on the informer's thread, one event at a time, after the cache
// has been updated; they must be quick (enqueue a key). Thread-safety: cache(),
// hasSynced(), waitForSync() and stats() may be called from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rpcjob/operator/backoff.h"
#include "rpcjob/operator/cache.h"
#include "rpcjob/operator/cancellation.h"
#include "rpcjob/operator/client.h"

namespace rpcjob::kube {

struct EventHandler {
  std::function<void(const ObjectPtr& obj)> onAdd;
  std::function<void(const ObjectPtr& oldObj, const ObjectPtr& newObj)> onUpdate;
  std::function<void(const ObjectPtr& obj)> onDelete;  // the last state known
};

struct InformerOptions {
  std::string ns;  // empty: all namespaces
  std::string labelSelector;
  std::string fieldSelector;
  std::chrono::seconds watchTimeout{300};
  std::chrono::milliseconds idleTimeout{0};  // 0: the watch's timeout + 30 s
  Backoff::Options backoff = Backoff::Options()
                                 .setInitial(std::chrono::milliseconds(800))
                                 .setMax(std::chrono::seconds(30));
};

class Informer {
 public:
  Informer(std::shared_ptr<Client> client, Resource resource, InformerOptions options = {});
  ~Informer();  // stops
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Before start().
  void addHandler(EventHandler handler);

  void start();  // starts the informer's thread
  void stop();   // cancels the watch and joins

  bool hasSynced() const;  // the first list has landed in the cache
  // Whether it keeps in touch with the server: false once lists or watches
  // have failed without a success in between for longer than `tolerance`
  // (the cache is going stale: /healthz fails and the operator is restarted).
  bool healthy(std::chrono::steady_clock::duration tolerance) const;
  bool waitForSync(std::chrono::milliseconds timeout) const;

  const Cache& cache() const { return cache_; }
  const Resource& resource() const { return resource_; }

  struct Stats {
    int lists = 0;                // successful lists (1 + relists)
    int watches = 0;              // watch calls made
    int errors = 0;               // failed lists and watches
    int events = 0;               // watch events applied
    std::string resourceVersion;  // the last seen
  };
  Stats stats() const;

 private:
  void run();
  bool relist();
  void apply(const WatchEvent& event);

  std::shared_ptr<Client> client_;
  Resource resource_;
  InformerOptions options_;
  std::vector<EventHandler> handlers_;
  Cache cache_;
  Cancellation cancel_;
  std::thread thread_;

  mutable std::mutex mu_;
  mutable std::condition_variable syncedCv_;
  bool synced_ = false;
  // Since when every list or watch has failed; unset after a success.
  std::optional<std::chrono::steady_clock::time_point> failingSince_;
  Stats stats_;
};

}  // namespace rpcjob::kube
