#pragma once
// rpcjob_cma's copy threads: a small pool, and one transfer's copy split over
// it in pieces (chunk_plan.h). Used on both sides of the channel: by the
// receiver pulling the sender's bytes, and by the sender pushing its bytes into
// the receiver's arena (mtcma_channel.h).

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chunk_plan.h"

namespace rpcjob::runtime::channels {

// Runs tasks on a few threads; drains its queue before the threads exit. The
// threads share the queue's state, so a task that drops the last reference to
// the pool's owner does not pull the state from under them.
class CopyPool {
 public:
  // spin: how long an idle thread polls the queue before it sleeps (0: sleeps
  // at once). A sleeping thread costs a futex wake-up, and on a virtual machine
  // an idle vCPU's wake-up, before it starts its piece.
  CopyPool(size_t threads, std::chrono::microseconds spin);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  void post(std::vector<std::function<void()>> tasks);
  // Joins the threads (detaches the calling one, when a task stops the pool).
  void stop();
  size_t size() const { return threads_.size(); }

 private:
  struct State;
  static void loop(State& state);

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

// Copies bytes [offset, offset + length) of a transfer: "" or what went wrong.
using CopyPiece = std::function<std::string(size_t offset, size_t length)>;

// Runs `piece` over `plan`'s pieces of a `length`-byte transfer: a one-piece
// plan on the calling thread, before this returns; else piece 0 on the calling
// thread when the plan says so, the others on `pool`. `done` runs once with
// the first error ("" for none), on the thread whose piece ends last.
void copyInPieces(CopyPool& pool, const ChunkPlan& plan, size_t length, CopyPiece piece,
                  std::function<void(const std::string& error)> done);

}  // namespace rpcjob::runtime::channels
