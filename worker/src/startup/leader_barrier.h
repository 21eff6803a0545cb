#pragma once
// The start-up barrier of large jobs (StartPipes::kLeaderBarrier), linear in
// the workers where a full mesh is quadratic: every worker, once it listens,
// joins at the leader (rank 0) with the built-in kBuiltinStartJoin call, which
// the leader answers once every worker has joined. So when start() returns on
// any worker, every worker listens, and a first call to any of them connects.
// Pipes between other workers open on first use.
//
// A join is a long poll: the leader holds it at most the wait its caller gave
// (up to a second) and then answers with the workers still missing, so that a
// worker whose start-up times out names them. Each join also carries the
// worker's CUDA device count, and the final answer every worker's: the device
// maps are checked against them in start(), as the full mesh's handshakes let
// it do. A leader that is not listening yet is redialled with backoff until
// the deadline; a leader whose own deadline passed answers every join with
// "failed" and the missing workers, so that all fail within their startTimeout
// naming the same workers.
//
// Thread safety: join() runs on TensorPipe's threads while run() runs on the
// thread in start().

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "rpcjob/runtime/future.h"

namespace rpcjob::runtime {

class RuntimeImpl;

inline constexpr const char* kBuiltinStartJoin = "rpcjob.start_join";

namespace startup {

class LeaderBarrier {
 public:
  explicit LeaderBarrier(RuntimeImpl& runtime);

  // The built-in, on the leader: (devices, waitMs) from worker `rank`.
  Future join(int rank, std::vector<c10::IValue> args);

  // In start() on every worker: returns every worker's CUDA device count by
  // rank, or throws RpcError (kConnection) naming the workers that did not
  // join (or the leader that could not be reached) by `deadline`.
  std::vector<std::int64_t> run(std::chrono::steady_clock::time_point deadline,
                                std::int64_t ownDevices);

 private:
  enum class State : std::int64_t { kWaiting = 0, kComplete = 1, kFailed = 2 };
  struct Waiter {
    Promise answer;
    std::chrono::steady_clock::time_point until;
  };
  std::vector<std::int64_t> lead(std::chrono::steady_clock::time_point deadline,
                                 std::int64_t ownDevices);
  std::vector<std::int64_t> follow(std::chrono::steady_clock::time_point deadline,
                                   std::int64_t ownDevices);
  void markJoinedLocked(int rank, std::int64_t devices);
  std::vector<int> missingLocked() const;
  // Answers the joins due: all once the outcome is decided, else those whose
  // wait is over (each with the workers still missing).
  void answerDue(std::chrono::steady_clock::time_point now);
  std::string names(const std::vector<int>& ranks) const;

  RuntimeImpl& rt_;
  std::mutex mu_;
  std::condition_variable changed_;
  State state_ = State::kWaiting;
  std::vector<bool> joined_;
  std::vector<std::int64_t> devices_;
  std::vector<Waiter> waiters_;
};

}  // namespace startup
}  // namespace rpcjob::runtime
