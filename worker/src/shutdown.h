#pragma once
// Graceful shutdown, a barrier among all workers (as PyTorch's _wait_all_workers):
// each worker first waits until its own outgoing calls are answered, then joins
// at the leader (rank 0) with a call that the leader answers once every worker
// has joined or is found dead (a ping fails to connect). Until then every worker
// keeps serving, so calls between workers that have not joined yet complete.
// Last, each waits for its pipe writes still in flight (a tensor's send may
// complete after the call's answer).
// Everything is bounded by the caller's deadline; a dead leader fails the join
// call at once, and the worker then closes on its own.

#include <chrono>
#include <memory>
#include <mutex>
#include <set>

#include "future_state.h"

namespace rpcjob::runtime {

class RuntimeImpl;

class ShutdownCoordinator {
 public:
  explicit ShutdownCoordinator(RuntimeImpl& runtime) : rt_(runtime) {}
  // The built-in join function (on the leader): completes when all have joined.
  Future join(int rank);
  // A worker's connection to us closed: its join no longer counts. A worker
  // killed and started again (same rank, a new process) joins anew, and one
  // that is gone is found so by the ping. Counting the old process's join let
  // the leader end while the new one was still starting (FailureTest's restart
  // case, one run in seven): the others then exited under it.
  void forget(int rank);
  void onIdle() {}
  // Runs the protocol until it completes or `deadline` passes.
  void run(std::chrono::milliseconds deadline);

 private:
  std::shared_ptr<detail::FutureState> allJoined();
  void waitForWrites(std::chrono::steady_clock::time_point until);
  void markJoined(int rank);
  RuntimeImpl& rt_;
  std::mutex mu_;
  std::set<int> joined_;
  std::shared_ptr<detail::FutureState> allJoined_;
};

}  // namespace rpcjob::runtime
