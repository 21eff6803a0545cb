#pragma once
// Work that a thread waiting for a context's backward pass runs itself.
//
// dist_autograd::backward sends the gradients of its roots to the workers the
// forward pass went through and waits until they are done; the gradients of the
// tensors this worker sent them come back meanwhile, as calls of the gradients
// built-in, and run this worker's part of the graph. On the runtime's pool each
// is a hand-off to a thread that slept since the last training step (25-55 us to
// wake one on the GPU hosts, whose vCPUs are woken through the hypervisor; 52 us
// in a traced recipe step on 2 x H200), and the waiter's own wake-up when the
// pass ends is another. The waiting thread has nothing else to do: it runs its
// context's gradient work as it arrives, spins (spinBudget(), yielding) between
// pieces, and sleeps only once the budget is spent.
//
// Thread safety: every method may be called from any thread.

#include <chrono>
#include <functional>
#include <memory>

#include "rpcjob/runtime/future.h"

namespace rpcjob::runtime::autograd {

class HelpQueue {
  struct Shared;

 public:
  // Must not throw: it reports its own errors (a peer waits for its answer).
  using Task = std::function<void()>;
  using Leftover = std::function<void(Task&&)>;

  HelpQueue();

  // A thread that helps: offers are queued for it from its construction on, so
  // that work arriving before it waits is not missed (make it before sending
  // what brings the work back). When the last helper goes, tasks still queued go
  // to `leftover`, which must run them somewhere (also when a task throws,
  // against its contract, out of helpUntil).
  class Helper {
   public:
    Helper(HelpQueue& queue, Leftover leftover);
    ~Helper();
    Helper(const Helper&) = delete;
    Helper& operator=(const Helper&) = delete;

    // Runs offered tasks on this thread until `done` completes (true) or
    // `timeout` passed (false; nanoseconds::max(): never).
    bool helpUntil(const Future& done, std::chrono::nanoseconds timeout);

   private:
    std::shared_ptr<Shared> shared_;
    Leftover leftover_;
  };

  // Queues `task` for a helper and returns true; false, with `task` left as it
  // was, when there is none (run it elsewhere).
  bool offer(Task&& task);

 private:
  std::shared_ptr<Shared> shared_;  // also held by the wake-ups of done futures
};

}  // namespace rpcjob::runtime::autograd
