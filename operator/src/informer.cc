#include "rpcjob/operator/informer.h"

#include <random>

#include "rpcjob/operator/log.h"

namespace rpcjob::kube {

Informer::Informer(std::shared_ptr<Client> client, Resource resource, InformerOptions options)
    : client_(std::move(client)), resource_(std::move(resource)), options_(std::move(options)) {}

Informer::~Informer() {
  stop();
}

void Informer::addHandler(EventHandler handler) {
  handlers_.push_back(std::move(handler));
}

void Informer::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void Informer::stop() {
  cancel_.cancel();
  if (thread_.joinable()) thread_.join();
}

bool Informer::hasSynced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return synced_;
}

bool Informer::waitForSync(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return syncedCv_.wait_for(lock, timeout, [this] { return synced_; });
}

bool Informer::healthy(std::chrono::steady_clock::duration tolerance) const {
  std::lock_guard<std::mutex> lock(mu_);
  return !failingSince_ || std::chrono::steady_clock::now() - *failingSince_ < tolerance;
}

Informer::Stats Informer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool Informer::relist() {
  ObjectList list;
  try {
    ListOptions lo;
    lo.labelSelector = options_.labelSelector;
    lo.fieldSelector = options_.fieldSelector;
    list = client_->list(resource_, options_.ns, lo);
  } catch (const ApiError& e) {
    KLOG_WARN("informer", resource_.plural << ": list failed: " << e.what());
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.errors;
    if (!failingSince_) failingSince_ = std::chrono::steady_clock::now();
    return false;
  }
  std::map<std::string, ObjectPtr> fresh;
  for (auto& item : list.items) {
    auto obj = std::make_shared<const Object>(std::move(item));
    fresh.emplace(obj->metadata.key(), obj);
  }
  std::map<std::string, ObjectPtr> old = cache_.replaceAll(fresh);
  for (const auto& [key, obj] : fresh) {
    auto it = old.find(key);
    for (const auto& h : handlers_) {
      if (it == old.end()) {
        if (h.onAdd) h.onAdd(obj);
      } else if (it->second->metadata.resourceVersion != obj->metadata.resourceVersion) {
        if (h.onUpdate) h.onUpdate(it->second, obj);
      }
    }
  }
  for (const auto& [key, obj] : old) {
    if (fresh.count(key)) continue;
    for (const auto& h : handlers_) {
      if (h.onDelete) h.onDelete(obj);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lists;
    stats_.resourceVersion = list.resourceVersion;
    synced_ = true;
    failingSince_.reset();
  }
  syncedCv_.notify_all();
  KLOG_DEBUG("informer", resource_.plural << ": listed " << fresh.size() << " at version "
                                          << list.resourceVersion);
  return true;
}

void Informer::apply(const WatchEvent& event) {
  if (event.type == WatchEventType::kBookmark) return;
  auto obj = std::make_shared<const Object>(event.object);
  if (event.type == WatchEventType::kDeleted) {
    ObjectPtr old = cache_.erase(obj->metadata.key());
    for (const auto& h : handlers_) {
      if (h.onDelete) h.onDelete(obj);
    }
    (void)old;
  } else {
    ObjectPtr old = cache_.upsert(obj);
    for (const auto& h : handlers_) {
      if (old) {
        if (h.onUpdate) h.onUpdate(old, obj);
      } else if (h.onAdd) {
        h.onAdd(obj);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.events;
  failingSince_.reset();
}

void Informer::run() {
  Backoff backoff(options_.backoff);
  std::mt19937_64 rng(options_.backoff.seed != 0 ? options_.backoff.seed + 1
                                                 : std::random_device{}());
  bool needList = true;
  std::string rv;
  while (!cancel_.cancelled()) {
    if (needList) {
      if (!relist()) {
        cancel_.sleepFor(backoff.next());
        continue;
      }
      needList = false;
      backoff.reset();
      rv = stats().resourceVersion;
    }
    WatchOptions wo;
    wo.resourceVersion = rv;
    wo.labelSelector = options_.labelSelector;
    wo.fieldSelector = options_.fieldSelector;
    const int64_t base = options_.watchTimeout.count();
    wo.timeout =
        std::chrono::seconds(base + static_cast<int64_t>(rng() % std::max<int64_t>(base, 1)));
    wo.idleTimeout = options_.idleTimeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.watches;
    }
    auto started = std::chrono::steady_clock::now();
    WatchEnd end = client_->watch(
        resource_, options_.ns, wo, [this](const WatchEvent& e) { apply(e); }, cancel_);
    rv = end.lastResourceVersion;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.resourceVersion = rv;
      if (end.end == StreamEnd::kEof || end.end == StreamEnd::kIdle) failingSince_.reset();
    }
    switch (end.end) {
      case StreamEnd::kCancelled:
        break;
      case StreamEnd::kEof:
      case StreamEnd::kIdle: {
        if (end.end == StreamEnd::kIdle) {
          KLOG_INFO("informer", resource_.plural << ": watch idle, restarting at " << rv);
        }
        // A watch that ends at once with nothing in it (a server that closes
        // streams) must not turn into a busy loop.
        if (end.events == 0 &&
            std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) {
          cancel_.sleepFor(backoff.next());
        } else {
          backoff.reset();
        }
        break;
      }
      case StreamEnd::kError: {
        const ApiError& err = *end.error;
        if (err.gone()) {
          KLOG_INFO("informer", resource_.plural << ": version " << rv << " is gone, relisting");
          needList = true;
          break;
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.errors;
          if (!failingSince_) failingSince_ = std::chrono::steady_clock::now();
        }
        if (err.reason() == "BadWatchEvent") needList = true;
        auto delay = backoff.next();
        KLOG_WARN("informer", resource_.plural << ": watch failed (" << err.what()
                                               << "), retrying in " << delay.count() << " ms");
        cancel_.sleepFor(delay);
        break;
      }
    }
  }
}

}  // namespace rpcjob::kube
