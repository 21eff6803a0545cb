#pragma once
// The result of an asynchronous call: completes once with a value or an error.
//
// Thread safety: every method may be called from any thread. Copies share state.

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/runtime/device_event.h"
#include "rpcjob/runtime/ivalue_fwd.h"

namespace rpcjob::runtime {

namespace detail {
struct FutureState;
}

class Future {
 public:
  // Completed futures, mainly for functions registered as async and for tests.
  static Future fromValue(c10::IValue value);
  static Future fromError(std::exception_ptr error);

  bool isDone() const;
  // Blocks until done (and, in a CUDA build, until its device events occurred).
  void wait() const;
  // false when not done within `timeout`.
  bool waitFor(std::chrono::nanoseconds timeout) const;
  // Non-blocking wait of the CUDA-aware future RFC: makes the current streams wait
  // for the device events; on CPU the same as wait().
  void waitOnStreams() const;

  // Waits; the value, or throws the error (an RpcError for RPC failures).
  const c10::IValue& value() const;
  // waitOnStreams(), then the value (or throws): the host never waits on the
  // GPU; work enqueued afterwards on the current streams sees the tensors.
  const c10::IValue& valueOnStreams() const;
  bool hasError() const;             // waits
  std::exception_ptr error() const;  // waits; null when it succeeded
  std::string errorMessage() const;  // waits; empty when it succeeded

  // A future of fn(this) once this completes. fn runs on the runtime's pool (it
  // may block, e.g. call rpcSync); an exception from fn fails the returned future.
  Future then(std::function<c10::IValue(const Future&)> fn) const;
  // Runs fn on the thread that completes this future (a TensorPipe thread): no
  // hand-off, but fn must be short and must never block.
  void addInlineCallback(std::function<void(const Future&)> fn) const;

  // CUDA seam: events recorded for the value's devices (empty on CPU).
  std::vector<std::shared_ptr<DeviceEvent>> deviceEvents() const;

  explicit Future(std::shared_ptr<detail::FutureState> state);

 private:
  std::shared_ptr<detail::FutureState> state_;
};

// Waits for every future; their values in order, or throws the first error (in
// order) once all are done (torch.futures.wait_all).
std::vector<c10::IValue> waitAll(const std::vector<Future>& futures);
// A future that completes (with None, never an error) once every one of
// `futures` has; inspect them then (torch.futures.collect_all).
Future collectAll(const std::vector<Future>& futures);

// A future that user code completes (a promise): hand out future(), complete it
// once with setValue or setError, from any thread. Its then() continuations
// run on the completing thread (there is no pool behind it).
class Promise {
 public:
  Promise();
  Future future() const;
  // false when it was completed already.
  bool setValue(c10::IValue value) const;
  bool setError(std::exception_ptr error) const;

 private:
  std::shared_ptr<detail::FutureState> state_;
};

}  // namespace rpcjob::runtime
