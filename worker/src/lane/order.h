#pragma once
// Per-pipe FIFO across the pipe and its lane, on the receiving side.
//
// A sender stamps each message with how many messages of the other path it
// sent before it (a pipe message: lane frames; a lane frame: ordered pipe
// messages), under the one lock that orders its writes. The receiver
// dispatches a message only once the other path dispatched that many. The
// lane's side never waits: a frame that must wait stays in its ring (the
// poller serves other lanes, and is rung when the pipe catches up). The
// pipe's side waits (yielding, then short sleeps) for frames that were
// published before the pipe message was written, so they are in the ring
// already; the wait ends when the lane fails, and after kAwaitLimit (a
// frame that never comes: a broken or hostile peer). A frame that claims to
// follow the very pipe message that waits for it is a contradiction: the lane
// fails at once (no deadlock between the two), whichever of the two came first
// (a reader that starts to wait rings the poller of a frame blocked before).
//
// Thread-safe: one pipe reader and one poller use it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace rpcjob::runtime::lane {

inline constexpr std::chrono::seconds kAwaitLimit{5};

enum class Delivery { kDelivered, kBlocked, kFailed };

class Order {
 public:
  // The pipe's reader, before a message that `before` lane frames precede.
  // false: the lane failed, or never delivered them (`error` says which).
  bool awaitLane(uint64_t before, std::string& error);
  // The pipe's reader, once an ordered message was dispatched.
  void pipeDispatched();
  // The poller, before a frame that `before` ordered pipe messages precede.
  Delivery mayDeliver(uint64_t before, std::string& error);
  void laneDispatched() { laneDone_.fetch_add(1, std::memory_order_release); }
  // Ends every wait for good (the pipe or its lane failed, shutdown).
  void fail() { failed_.store(true, std::memory_order_release); }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Rings the poller that holds the lane's blocked frame (set with the lane).
  void setWake(std::function<void()> wake) { wake_ = std::move(wake); }

 private:
  std::atomic<uint64_t> pipeDone_{0};
  std::atomic<uint64_t> laneDone_{0};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> pipeWaitsFor_{0};  // lane frames the pipe's reader waits for
  std::atomic<bool> laneBlocked_{false};
  std::atomic<uint64_t> blockedBefore_{0};  // the blocked frame's order, for errors
  std::function<void()> wake_;
};

}  // namespace rpcjob::runtime::lane
