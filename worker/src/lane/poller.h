#pragma once
// The thread that reads a runtime's incoming lanes (lane.h): every ring this
// process consumes, in turn. After its last frame it spins for the spin budget
// (spinAfterLastFrame: at least 100 us, a call's answer usually comes within
// it; as long as the runtime's adaptive budget while frames keep coming, since
// waking a sleeping thread costs 25-55 us on a virtual machine), then
// announces that it sleeps on its bell (a memfd of its
// own, which peers map to ring it) and waits on the bell's futex; any
// producer's frame wakes it. Idle, it costs nothing but that spin after each
// burst. It also wakes every 100 ms on its own, to drop closed lanes.
//
// Frames are delivered on this thread (inline functions run here, answers
// complete futures here: no hand-off). Thread-safe.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../spin_wait.h"
#include "lane.h"

namespace rpcjob::runtime::lane {

// RPCJOB_LANE_SPIN_US, else 100.
std::chrono::microseconds spinFromEnvironment();
// Whether RPCJOB_LANE_SPIN_US is set: then it is the spin, fixed.
bool spinFixedByEnvironment();

// How long the poller spins after its last frame before it sleeps: the lane's
// own spin, or, unless that is fixed, the runtime's adaptive budget when
// longer (spin_wait.h's AdaptiveSpin: RPCJOB_SPIN_US, 1 ms with 8 CPUs or more,
// while the idle gaps stay under four of it). A training step's answers come
// every few hundred microseconds to a millisecond: with 100 us the poller slept
// between steps and each answer waited 25-55 us for its wake-up (traced on
// 2 x H200). Pure.
std::chrono::microseconds spinAfterLastFrame(std::chrono::microseconds laneSpin, bool fixed,
                                             std::chrono::microseconds adaptiveBudget);

// Whether the calling thread is a lane poller's (of any runtime): lane frames'
// handlers run there, so nothing there may wait for a lane's frames.
bool onAPollerThread();

class Poller {
 public:
  // The bell's memfd is made now: `error` says why not (no lane then).
  // `fixed`: always `spin` (else spinAfterLastFrame's rule).
  Poller(std::chrono::microseconds spin, std::string& error, bool fixed = true);
  ~Poller();  // stop()
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // What peers need to ring us (LaneOffer's bellFd, bellToken).
  int64_t bellFd() const;
  uint64_t bellToken() const { return bellToken_; }

  // Starts polling `lane` (and the thread, with the first lane).
  void add(std::shared_ptr<Lane> lane);
  // Rings our own bell: a blocked lane may go on, a lane closed, stop.
  void wake();
  // Closes every lane, then joins the thread. Idempotent.
  void stop();
  bool onPollerThread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // On the poller's thread, as a frame is delivered: spin (not sleep) until at
  // least `span` from now. A frame with CUDA tensors is a GPU pipeline at
  // work, whose next request comes after its copies (milliseconds for large
  // tensors), past the adaptive budget; waking then costs 20-40 us on a
  // virtual machine, all of it in the next transfer's start (issue 20).
  void keepSpinning(std::chrono::microseconds span);

 private:
  void loop();
  Bell& bell() const;

  const std::chrono::microseconds spin_;
  const bool fixed_;
  AdaptiveSpin adaptive_;  // the gaps between this poller's frames
  uint64_t bellToken_ = 0;
  std::unique_ptr<SharedFile> bellFile_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Lane>> lanes_;  // under mu_; the thread copies it
  std::atomic<uint64_t> version_{0};
  std::atomic<bool> stop_{false};
  std::chrono::steady_clock::time_point spinUntil_{};  // the poller thread's (keepSpinning)
  std::thread thread_;
};

}  // namespace rpcjob::runtime::lane
