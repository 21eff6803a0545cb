#pragma once
// Releases that may put work on a GPU, held until this process puts work there
// anyway.
//
// Why: freeing a CUDA tensor that was used on other streams makes libtorch's
// caching allocator record an event on each of them. Two workers that share
// one GPU pay ~140 us each time the GPU passes from one's context to the
// other's (benchmarks/results/2026-11-24-h200x1-session7.md), so one such
// record from the worker that waits, made while the other computes (a sent
// tensor freed when its write completes; a released autograd context), costs
// the computing one two of those switches. The runtime moves such releases
// here and lets them go at its next GPU step (a CUDA tensor sent or received),
// when the GPU is this process's anyway.
//
// Bounded: more than kMaxItems objects or kMaxBytes (as the caller counts
// them) are released at once by the call that adds; an object older than
// kMaxAge goes when the runtime's timeout thread next looks (releaseStale),
// so an idle worker holds nothing for long. In a build without CUDA every
// release happens at once.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace rpcjob::runtime {

class DeferredReleases {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxItems = 256;
  static constexpr size_t kMaxBytes = size_t{256} << 20;
  static constexpr std::chrono::milliseconds kMaxAge{50};

  explicit DeferredReleases(bool enabled) : enabled_(enabled) {}
  // Keeps `object` (counted as `bytes`) until a release below.
  void add(std::shared_ptr<void> object, size_t bytes, Clock::time_point now);
  void releaseAll();
  // Those added before now - age (and everything after them, in order).
  void releaseOlderThan(Clock::time_point now, Clock::duration age);
  size_t held() const { return held_.load(std::memory_order_relaxed); }

 private:
  struct Item {
    std::shared_ptr<void> object;
    Clock::time_point added;
  };
  // Everything held, into `out` (released by the caller once the lock is gone).
  void takeAllLocked(std::vector<Item>& out);
  const bool enabled_;
  mutable std::mutex mu_;
  std::vector<Item> items_;
  size_t bytes_ = 0;
  std::atomic<size_t> held_{0};  // items_.size(), read without the lock
};

// The process's (never destroyed: whatever is held at exit is the OS's).
DeferredReleases& deferredReleases();
void releaseLater(std::shared_ptr<void> object, size_t bytes);
void releaseDeferred();  // at once
void releaseStale();     // from a thread that runs anyway

// A GPU step's releases go after the step's message, not before it: freeing a
// released autograd context's tensors (an event recorded per stream each) sat
// between a training step's request and its write, 20-35 us on 2 x H200. A
// scope around sending or dispatching one message (the runtime's
// sendRequest, reply and pipe reads) collects noteGpuStep() calls made in it
// on this thread and releases once, when it ends; outside any scope
// noteGpuStep() releases at once. The GPU is this process's either way: the
// scope ends right after the step's work was enqueued.
class AfterGpuStep {
 public:
  explicit AfterGpuStep(DeferredReleases& releases = deferredReleases());
  ~AfterGpuStep();
  AfterGpuStep(const AfterGpuStep&) = delete;
  AfterGpuStep& operator=(const AfterGpuStep&) = delete;

 private:
  friend void noteGpuStep();
  DeferredReleases& releases_;
  AfterGpuStep* outer_;
  bool stepped_ = false;
};
void noteGpuStep();  // a CUDA tensor sent or received on this thread

}  // namespace rpcjob::runtime
