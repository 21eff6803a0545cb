#include "copy_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

namespace rpcjob::runtime::channels {

struct CopyPool::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool stopping = false;
  std::chrono::microseconds spin{0};
  std::atomic<size_t> queued{0};  // tasks.size(), read without the lock
  std::atomic<bool> stopRequested{false};
};

namespace {

void spinForWork(std::atomic<size_t>& queued, std::atomic<bool>& stopRequested,
                 std::chrono::microseconds spin) {
  const auto until = std::chrono::steady_clock::now() + spin;
  while (queued.load(std::memory_order_acquire) == 0 &&
         !stopRequested.load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
}

}  // namespace

CopyPool::CopyPool(size_t threads, std::chrono::microseconds spin)
    : state_(std::make_shared<State>()) {
  state_->spin = spin;
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([state = state_] { loop(*state); });
  }
}

CopyPool::~CopyPool() {
  stop();
}

void CopyPool::post(std::vector<std::function<void()>> tasks) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (auto& t : tasks) state_->tasks.push_back(std::move(t));
    state_->queued.store(state_->tasks.size(), std::memory_order_release);
  }
  // One wake-up per task: a transfer of fewer pieces than threads leaves the
  // rest asleep rather than racing them for the queue's lock.
  if (tasks.size() >= threads_.size()) {
    state_->cv.notify_all();
  } else {
    for (size_t i = 0; i < tasks.size(); ++i) state_->cv.notify_one();
  }
}

void CopyPool::stop() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->stopping) return;
    state_->stopping = true;
    state_->stopRequested.store(true, std::memory_order_release);
  }
  state_->cv.notify_all();
  for (auto& t : threads_) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // a pool task dropped the last reference to the pool's owner
    } else if (t.joinable()) {
      t.join();
    }
  }
}

void CopyPool::loop(State& state) {
  for (;;) {
    std::function<void()> task;
    if (state.spin.count() > 0) spinForWork(state.queued, state.stopRequested, state.spin);
    {
      std::unique_lock<std::mutex> lock(state.mu);
      state.cv.wait(lock, [&state] { return state.stopping || !state.tasks.empty(); });
      if (state.tasks.empty()) return;  // stopping, queue drained
      task = std::move(state.tasks.front());
      state.tasks.pop_front();
      state.queued.store(state.tasks.size(), std::memory_order_release);
    }
    task();
  }
}

namespace {

// A split copy: the pieces count down; the last one to end calls done.
struct SplitCopy {
  CopyPiece piece;
  std::function<void(const std::string&)> done;
  size_t pieceBytes = 0;
  size_t length = 0;
  std::atomic<size_t> remaining{0};
  std::mutex mu;
  std::string error;

  void run(size_t i) {
    const size_t offset = i * pieceBytes;
    std::string e = piece(offset, std::min(pieceBytes, length - offset));
    if (!e.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      if (error.empty()) error = std::move(e);
    }
    if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::string final;
      {
        std::lock_guard<std::mutex> lock(mu);
        final = error;
      }
      done(final);
    }
  }
};

}  // namespace

void copyInPieces(CopyPool& pool, const ChunkPlan& plan, size_t length, CopyPiece piece,
                  std::function<void(const std::string& error)> done) {
  if (plan.pieces <= 1) {
    done(piece(0, length));
    return;
  }
  auto copy = std::make_shared<SplitCopy>();
  copy->piece = std::move(piece);
  copy->done = std::move(done);
  copy->pieceBytes = plan.piece;
  copy->length = length;
  copy->remaining = plan.pieces;
  const size_t first = plan.readerTakesFirst ? 1 : 0;
  std::vector<std::function<void()>> tasks;
  tasks.reserve(plan.pieces - first);
  for (size_t i = first; i < plan.pieces; ++i) {
    tasks.push_back([copy, i] { copy->run(i); });
  }
  pool.post(std::move(tasks));
  if (first == 1) copy->run(0);  // while the pool copies the rest
}

}  // namespace rpcjob::runtime::channels
