#include "shutdown.h"

#include <tensorpipe/tensorpipe.h>

#include <algorithm>
#include <iostream>

#if RPCJOB_WITH_CUDA
#include "cuda/cuda_serialization.h"
#endif
#include "release_later.h"
#include "runtime_impl.h"

namespace rpcjob::runtime {

std::shared_ptr<detail::FutureState> ShutdownCoordinator::allJoined() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!allJoined_) allJoined_ = detail::newFutureState(nullptr);
  return allJoined_;
}

void ShutdownCoordinator::markJoined(int rank) {
  auto all = allJoined();
  bool complete;
  {
    std::lock_guard<std::mutex> lock(mu_);
    joined_.insert(rank);
    complete = joined_.size() >= rt_.workers().size();
  }
  if (complete) all->complete(c10::IValue());
}

void ShutdownCoordinator::forget(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  // Once all joined, the answers are out: nothing to take back.
  if (allJoined_ && allJoined_->done.load(std::memory_order_acquire)) return;
  joined_.erase(rank);
}

Future ShutdownCoordinator::join(int rank) {
  auto all = allJoined();
  markJoined(rank);
  return Future(all);
}

void ShutdownCoordinator::run(std::chrono::milliseconds deadline) {
  auto until = Clock::now() + deadline;
  {
    // Our own calls first: nobody may close while we still wait for answers.
    std::unique_lock<SpinMutex> lock(rt_.pendingMu_);
    rt_.pendingCv_.wait_until(lock, until, [&] { return rt_.noCallsPending(); });
  }
  auto remaining = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  };
  if (rt_.self().rank != 0) {
    if (remaining().count() <= 0) return;
    CallOptions options;
    options.timeout = remaining();
    // Fails at once if the leader is dead; then there is nobody to wait for.
    rt_.rpcAsync(rt_.workers()[0].name, kBuiltinShutdownJoin, {}, options).wait();
    waitForWrites(until);
    return;
  }
  auto all = allJoined();
  markJoined(0);
  Future done(all);
  while (!done.waitFor(std::chrono::milliseconds(100)) && remaining().count() > 0) {
    std::set<int> missing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& w : rt_.workers()) {
        if (!joined_.count(w.rank)) missing.insert(w.rank);
      }
    }
    for (int rank : missing) {
      CallOptions options;
      options.timeout = std::chrono::milliseconds(200);
      Future ping = rt_.rpcAsync(rt_.workers()[rank].name, kBuiltinPing, {}, options);
      // A live peer that has not joined yet answers: no error to look at
      // (rethrowing a null exception_ptr is undefined behaviour: it crashed here).
      if (!ping.hasError()) continue;
      try {
        std::rethrow_exception(ping.error());
      } catch (const RpcError& e) {
        if (e.code() == ErrorCode::kConnection) {  // dead: nothing to wait for
          // Said, because a live worker taken for dead is left behind in its own
          // start-up or shutdown (it waits on us until its own deadline).
          std::cerr << "rpcjob: worker '" << rt_.self().name << "': shutdown: not waiting for '"
                    << rt_.workers()[rank].name << "', unreachable: " << e.what() << "\n";
          markJoined(rank);
        }
      } catch (...) {
      }
    }
  }
  // Let the join answers reach the others before we close our pipes.
  if (done.isDone()) {
    std::unique_lock<SpinMutex> lock(rt_.pendingMu_);
    rt_.pendingCv_.wait_until(lock, std::min(until, Clock::now() + std::chrono::milliseconds(200)),
                              [&] { return rt_.serving_ == 0; });
  }
  waitForWrites(until);
}

void ShutdownCoordinator::waitForWrites(Clock::time_point until) {
  // Every call is answered, but a tensor we sent may still wait for its
  // channel's acknowledgement; closing now would fail that send (and the
  // metrics would count it as an error, not as bytes sent).
  std::unique_lock<SpinMutex> lock(rt_.pendingMu_);
  rt_.pendingCv_.wait_until(lock, until, [&] { return rt_.writesInFlight_.load() == 0; });
}

void RuntimeImpl::shutdown(ShutdownMode mode, std::chrono::milliseconds deadline) {
  if (closed_) return;
  if (mode == ShutdownMode::kGraceful && started_ && !closing_.exchange(true)) {
    shutdown_->run(deadline);
  }
  if (closed_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(listenerMu_);
    if (listener_) listener_->close();
  }
  stopLanes();  // before the pipes: a reader may wait on a lane's frames
  if (context_) {
    context_->close();
    context_->join();
  }
  readHandoff_->stop();  // no read is handed over once the context is joined
#if RPCJOB_WITH_CUDA
  // No more reads here (the hand-off ran what it held): the held buffers' thread
  // ends and they go back (another runtime's next receive starts it again), so
  // none of ours is inside CUDA, nor holding its memory, as the process exits.
  cuda::quiesceReceiveSpares();
#endif
  std::vector<Pending> failed;
  {
    std::lock_guard<SpinMutex> lock(pendingMu_);
    failed = pending_.takeAll();
    std::fill(unanswered_.begin(), unanswered_.end(), 0);
    closes_.clear();  // the context is closed: so are they
    stopTimeouts_ = true;
  }
  slots_.takeAll(failed);  // after stopTimeouts_: none slips past (pending_slots.h)
  pendingCv_.notify_all();
  if (timeoutThread_.joinable()) timeoutThread_.join();
  failPending(std::move(failed),
              std::make_exception_ptr(RpcError(ErrorCode::kShutdown, self().name,
                                               "worker '" + self().name + "' shut down")));
  pool_->stop();
  rrefs_->clear();
  {
    std::lock_guard<std::mutex> lock(serverMu_);
    serverPipes_.clear();
  }
  for (auto& peer : peers_) {
    std::lock_guard<std::mutex> lock(peer->mu);
    peer->pipe.reset();
  }
  releaseDeferred();  // what our writes and contexts left there (release_later.h)
}

}  // namespace rpcjob::runtime
