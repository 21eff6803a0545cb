#pragma once
// The controller's queue of keys ("namespace/name"), with client-go's guarantees:
//
//  - a key queued twice before a worker takes it is processed once (dedup);
//  - a key is never handed to two workers at once: a key added while it is being
//    processed is queued again when done() is called for it;
//  - addRateLimited() re-adds a key after a per-key exponential delay,
//    base * 2^failures capped at max; forget() resets the key's failures (call it
//    after a successful reconcile);
//  - addAfter() adds a key once a delay has passed (a requeue-after).
//
// Use:   while (auto key = q.get()) { ok = work(*key); ok ? q.forget(*key)
//                                     : q.addRateLimited(*key); q.done(*key); }
// Thread-safety: every method may be called from any thread.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace rpcjob::kube {

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::chrono::milliseconds baseDelay{5};
    std::chrono::milliseconds maxDelay{std::chrono::seconds(300)};
  };

  WorkQueue() : WorkQueue(Options{}) {}
  explicit WorkQueue(Options options) : options_(options) {}

  void add(const std::string& key);
  void addAfter(const std::string& key, std::chrono::milliseconds delay);
  void addRateLimited(const std::string& key);
  void forget(const std::string& key);
  int failures(const std::string& key) const;
  // The delay addRateLimited() would use now, without adding.
  std::chrono::milliseconds nextDelay(const std::string& key) const;

  // Blocks until a key is ready; nullopt after shutDown().
  std::optional<std::string> get();
  // Like get(), but gives up after `timeout`.
  std::optional<std::string> getFor(std::chrono::milliseconds timeout);
  void done(const std::string& key);

  // Wakes every get(); later adds are ignored. Keys in flight still get done().
  void shutDown();
  bool shuttingDown() const;

  size_t depth() const;       // keys ready to be taken
  size_t processing() const;  // keys taken and not done
  size_t delayed() const;     // keys waiting for their delay

 private:
  std::optional<std::string> take(std::unique_lock<std::mutex>& lock,
                                  std::optional<Clock::time_point> deadline);
  void addLocked(const std::string& key);
  void promoteReadyLocked(Clock::time_point now);
  std::chrono::milliseconds delayFor(int failures) const;

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;  // queued, or added while processing
  std::set<std::string> processing_;
  std::multimap<Clock::time_point, std::string> waiting_;
  std::map<std::string, int> failures_;
  bool shutDown_ = false;
};

}  // namespace rpcjob::kube
