#pragma once
// A cancellation signal shared between the code that runs a long call (a watch,
// a backoff sleep, the leader-election loop) and the code that stops it.
//
// Thread-safety: every method may be called from any thread.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>

namespace rpcjob::kube {

class Cancellation {
 public:
  Cancellation() = default;
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Sets the signal and runs every registered callback once (outside the lock).
  void cancel();
  bool cancelled() const;

  // Registers fn to run on cancel(); runs it at once if already cancelled.
  // Returns an id for unregister(). Callbacks must be quick and must not block.
  int onCancel(std::function<void()> fn);
  void unregister(int id);

  // Sleeps until cancelled or `d` has passed. Returns true when cancelled.
  bool sleepFor(std::chrono::milliseconds d) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool cancelled_ = false;
  int nextId_ = 0;
  std::map<int, std::function<void()>> callbacks_;
};

// Registers a callback for the lifetime of a scope.
class CancelRegistration {
 public:
  CancelRegistration(Cancellation& c, std::function<void()> fn) : c_(c), id_(c.onCancel(fn)) {}
  ~CancelRegistration() { c_.unregister(id_); }
  CancelRegistration(const CancelRegistration&) = delete;
  CancelRegistration& operator=(const CancelRegistration&) = delete;

 private:
  Cancellation& c_;
  int id_;
};

}  // namespace rpcjob::kube
