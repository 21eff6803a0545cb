#pragma once
// The shared state behind Future: the runtime completes it, users wait on it.

#include <ATen/core/ivalue.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "rpcjob/runtime/future.h"

namespace rpcjob::runtime {
class ThreadPool;

namespace detail {

struct FutureState : std::enable_shared_from_this<FutureState> {
  explicit FutureState(std::shared_ptr<ThreadPool> pool = nullptr) : pool(std::move(pool)) {}

  // Both return false when already completed (the first completion wins: a
  // timeout racing a response, for example).
  bool complete(c10::IValue v);
  bool fail(std::exception_ptr e);

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  c10::IValue value;
  std::exception_ptr error;
  std::vector<std::function<void(const Future&)>> callbacks;
  std::shared_ptr<ThreadPool> pool;                  // where then() continuations run
  std::vector<std::shared_ptr<DeviceEvent>> events;  // CUDA seam, empty on CPU

 private:
  bool finish(c10::IValue* v, std::exception_ptr e);
};

inline std::shared_ptr<FutureState> newFutureState(std::shared_ptr<ThreadPool> pool) {
  return std::make_shared<FutureState>(std::move(pool));
}

// Completes `to` with `from`'s value or error once `from` is done.
void completeFrom(const std::shared_ptr<FutureState>& to, const Future& from);

}  // namespace detail
}  // namespace rpcjob::runtime
