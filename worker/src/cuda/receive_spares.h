#pragma once
// Receive buffers held ahead (the CUDA build's receives; the logic alone has no
// CUDA in it and is tested without a GPU).
//
// Why: a large tensor's receive cannot start its copy before its buffer exists,
// and the caching allocator took 26 us for a 400 MB block on an H200 (it first
// queries the events of every stream the freed block was used on): a third of
// what stood between a 400 MB round trip and its copies (worker/src/cuda/README.md).
// Large tensors mostly come again at the same size (a training step's
// activations and gradients, a pipeline's micro-batches), so after each message a
// thread of ours allocates the next buffer of each large size the message
// received, and the next receive of that size on that device takes it at once.
//
// Memory: a process holds at most `budget` bytes this way (the process-wide
// instance: RPCJOB_RECEIVE_SPARE_BYTES, default 1 GiB per process, 0 turns it
// off), only for tensors of at least kMinBytes; a size that stops coming is given
// back to the allocator, oldest first, when a newer one needs the room, and all
// of it when a runtime shuts down. Held buffers are allocated, so the caching
// allocator cannot reclaim them when it runs out of memory: lower the budget
// near a GPU's limit.
//
// Thread safety: every member may be called from any thread.
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rpcjob::runtime::cuda {

class ReceiveSpares {
 public:
  static constexpr size_t kMinBytes = size_t{1} << 20;
  static constexpr size_t kDefaultBudget = size_t{1} << 30;

  // Allocates `bytes` on `device` (ours: the caching allocator on the device's
  // allocation stream); runs on the spares' own thread. May throw (out of memory):
  // that size is then not held.
  using Allocate = std::function<c10::DataPtr(int device, size_t bytes)>;

  // RPCJOB_RECEIVE_SPARE_BYTES's value: unset or empty, kDefaultBudget; else a
  // count of bytes in decimal digits, or kDefaultBudget with `problem` saying why
  // the value was not taken.
  static size_t budgetFrom(const char* value, std::string& problem);

  ReceiveSpares(size_t budget, Allocate allocate);
  ~ReceiveSpares();  // stops the thread; what is held goes back to its allocator
  ReceiveSpares(const ReceiveSpares&) = delete;
  ReceiveSpares& operator=(const ReceiveSpares&) = delete;

  // A held buffer of exactly `bytes` on `device`, handed over; empty when there
  // is none.
  c10::DataPtr take(int device, size_t bytes);
  // A message received these (device, bytes): hold one buffer for each (a size
  // listed twice: two), allocated on our thread, not the caller's. Sizes below
  // kMinBytes or above the budget are left out.
  void hold(const std::vector<std::pair<int, size_t>>& received);
  // Returns once the thread has done what hold() asked so far (tests).
  void settle();
  // Stops the thread (waits for an allocation in progress); hold() asks nothing
  // from then on, take() still hands out what is held.
  void stop();
  // Ends the thread and gives back what is held, until the next hold(), which
  // starts a thread again: a runtime that shuts down leaves no thread of ours
  // inside CUDA while the process exits, and no GPU memory held for it.
  void quiesce();
  size_t budget() const;

  struct Stats {
    uint64_t taken = 0;   // receives that found a buffer
    uint64_t missed = 0;  // receives of kMinBytes or more that found none
    uint64_t held = 0;    // buffers held now
    uint64_t heldBytes = 0;
  };
  Stats stats() const;
  // How many buffers of exactly `bytes` on `device` are held now.
  size_t held(int device, size_t bytes) const;

 private:
  struct State;
  // stop() and quiesce(): a later hold() starts a thread again unless `forever`;
  // `release`: what is held goes back to the allocator.
  static void endThread(State& state, bool forever, bool release);
  std::shared_ptr<State> state_;
};

// A tensor of `sizes` and `dtype` on `buffer` (`bytes` of it, from `allocator`),
// as at::empty makes one for `key`'s device: contiguous, offset 0, on storage
// that grows (resize_, out= ops).
at::Tensor tensorOnBuffer(c10::DataPtr buffer, size_t bytes, const std::vector<int64_t>& sizes,
                          c10::ScalarType dtype, c10::Allocator* allocator, c10::DispatchKey key);

}  // namespace rpcjob::runtime::cuda
