#include "order.h"

#include <sched.h>

#include <thread>

namespace rpcjob::runtime::lane {

bool Order::awaitLane(uint64_t before, std::string& error) {
  if (laneDone_.load(std::memory_order_acquire) >= before) return true;
  pipeWaitsFor_.store(before, std::memory_order_seq_cst);
  // A frame the poller left blocked before this wait began is looked at
  // again now: if it follows this very message, the poller fails the lane at
  // once (mayDeliver) instead of this reader giving up after kAwaitLimit.
  if (laneBlocked_.load(std::memory_order_seq_cst) && wake_) wake_();
  const auto start = std::chrono::steady_clock::now();
  bool ok = true;
  for (int round = 0;; ++round) {
    if (laneDone_.load(std::memory_order_acquire) >= before) break;
    if (failed()) {
      error = "the pipe's shared-memory lane failed";
      ok = false;
      break;
    }
    if (round < 200) {
      sched_yield();
      continue;
    }
    if (std::chrono::steady_clock::now() - start > kAwaitLimit) {
      error = "the shared-memory lane did not deliver the " + std::to_string(before) +
              " frames that precede a message (" +
              std::to_string(laneDone_.load(std::memory_order_acquire)) + " came";
      if (laneBlocked_.load(std::memory_order_acquire)) {
        error += "; the next one waits for " +
                 std::to_string(blockedBefore_.load(std::memory_order_relaxed)) +
                 " pipe messages, " + std::to_string(pipeDone_.load(std::memory_order_acquire)) +
                 " dispatched";
      }
      error += ")";
      ok = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  pipeWaitsFor_.store(0, std::memory_order_release);
  return ok;
}

void Order::pipeDispatched() {
  pipeDone_.fetch_add(1, std::memory_order_seq_cst);
  if (laneBlocked_.load(std::memory_order_seq_cst) && wake_) wake_();
}

Delivery Order::mayDeliver(uint64_t before, std::string& error) {
  if (pipeDone_.load(std::memory_order_acquire) >= before) {
    laneBlocked_.store(false, std::memory_order_relaxed);
    return Delivery::kDelivered;
  }
  blockedBefore_.store(before, std::memory_order_relaxed);
  laneBlocked_.store(true, std::memory_order_seq_cst);
  if (pipeDone_.load(std::memory_order_seq_cst) >= before) {  // it came meanwhile
    laneBlocked_.store(false, std::memory_order_relaxed);
    return Delivery::kDelivered;
  }
  // Only this thread moves laneDone_: a reader waiting for more frames than
  // were delivered is stuck at its message until this frame goes.
  if (pipeWaitsFor_.load(std::memory_order_seq_cst) > laneDone_.load(std::memory_order_relaxed)) {
    // The pipe's next message waits for this lane's frames while this frame
    // says it follows that message (or a later one): a peer that lies.
    error = "a lane frame that follows " + std::to_string(before) +
            " pipe messages while the pipe waits for the lane";
    return Delivery::kFailed;
  }
  return Delivery::kBlocked;
}

}  // namespace rpcjob::runtime::lane
