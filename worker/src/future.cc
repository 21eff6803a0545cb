#include <algorithm>
#include <thread>

#include "call_batch_state.h"
#include "future_state.h"
#include "lane/lane.h"
#include "rpcjob/runtime/errors.h"
#include "spin_wait.h"
#include "thread_pool.h"
#include "trace/trace.h"

namespace rpcjob::runtime {
namespace detail {

bool FutureState::complete(c10::IValue v) {
  return finish(&v, nullptr);
}
bool FutureState::fail(std::exception_ptr e) {
  return finish(nullptr, std::move(e));
}

bool FutureState::finish(c10::IValue* v, std::exception_ptr e) {
  std::vector<std::function<void(const Future&)>> toRun;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done.load(std::memory_order_relaxed)) return false;
    if (v != nullptr) {
      value = std::move(*v);
    } else {
      error = std::move(e);
    }
    done.store(true, std::memory_order_release);
    toRun.swap(callbacks);
  }
  cv.notify_all();
  if (!toRun.empty()) {
    Future self(shared_from_this());
    for (auto& fn : toRun) fn(self);
  }
  return true;
}

void completeFrom(const std::shared_ptr<FutureState>& to, const Future& from) {
  from.addInlineCallback([to](const Future& done) {
    if (done.hasError()) {
      to->fail(done.error());
      return;
    }
    auto events = done.deviceEvents();
    if (!events.empty()) {
      std::lock_guard<std::mutex> lock(to->mu);
      to->events = std::move(events);
    }
    to->complete(done.value());
  });
}

}  // namespace detail

namespace {

// Until `state` completes, on the host: what wait() and waitOnStreams() share
// (rpcSync waits through the latter, so a small CPU call's latency is here).
// A waiting caller spins kShortSpin at most, less than the pool's budget: a
// caller often waits for long transfers, where spinning only takes CPU from
// the copy threads (a 1 ms spin everywhere: 400 MB round trip at 70-79 % of the
// memcpy bound in 3 of 6 runs on the GPU host), and the recipe kept its gain
// with the caller at 50 us (0.0104-0.0151 s with the pool and poller at 1 ms;
// 1 ms for the caller too gained nothing: 2026-11-25-h100x1-session13.md).

void awaitCompletion(detail::FutureState& state) {
  detail::flushCallBatch();  // the awaited call may be among those held
  lane::publishTurn();       // or among a poller's turn's (a callback waiting)
  if (state.done.load(std::memory_order_acquire)) return;
  // A short spin first (spin_wait.h): a small call's answer often lands within
  // microseconds, and sleeping on the condition variable costs a futex wake-up
  // on each side.
  if (!spinUntil([&] { return state.done.load(std::memory_order_acquire); },
                 std::min(spinBudget(), kShortSpin))) {
    trace::point("future.sleep");
    std::unique_lock<std::mutex> lock(state.mu);
    state.cv.wait(lock, [&] { return state.done.load(std::memory_order_acquire); });
    trace::point("future.woke");
  }
  // The waiter saw the completion: from call.complete to here is its notice (a
  // spinning caller's, or a wake-up's).
  trace::point("future.seen");
}

}  // namespace

Future::Future(std::shared_ptr<detail::FutureState> state) : state_(std::move(state)) {}

Future Future::fromValue(c10::IValue value) {
  auto state = std::make_shared<detail::FutureState>();
  state->complete(std::move(value));
  return Future(std::move(state));
}

Future Future::fromError(std::exception_ptr error) {
  auto state = std::make_shared<detail::FutureState>();
  state->fail(std::move(error));
  return Future(std::move(state));
}

bool Future::isDone() const {
  return state_->done.load(std::memory_order_acquire);
}

void Future::wait() const {
  awaitCompletion(*state_);
  if (!state_->events.empty()) {
    for (auto& event : state_->events) event->synchronize();
    trace::point("future.synchronized");
  }
}

bool Future::waitFor(std::chrono::nanoseconds timeout) const {
  detail::flushCallBatch();
  lane::publishTurn();
  trace::point("future.sleep");
  std::unique_lock<std::mutex> lock(state_->mu);
  bool done = state_->cv.wait_for(lock, timeout,
                                  [&] { return state_->done.load(std::memory_order_acquire); });
  trace::point("future.woke");
  return done;
}

void Future::waitOnStreams() const {
  awaitCompletion(*state_);
  for (auto& event : state_->events) event->blockCurrentStream();
}

const c10::IValue& Future::value() const {
  wait();
  if (state_->error) std::rethrow_exception(state_->error);
  return state_->value;
}

const c10::IValue& Future::valueOnStreams() const {
  waitOnStreams();
  if (state_->error) std::rethrow_exception(state_->error);
  return state_->value;
}

bool Future::hasError() const {
  wait();
  return state_->error != nullptr;
}

std::exception_ptr Future::error() const {
  wait();
  return state_->error;
}

std::string Future::errorMessage() const {
  wait();
  if (!state_->error) return {};
  try {
    std::rethrow_exception(state_->error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

void Future::addInlineCallback(std::function<void(const Future&)> fn) const {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done.load(std::memory_order_relaxed)) {
      state_->callbacks.push_back(std::move(fn));
      return;
    }
  }
  fn(*this);
}

Future Future::then(std::function<c10::IValue(const Future&)> fn) const {
  auto pool = state_->pool;
  auto next = std::make_shared<detail::FutureState>(pool);
  auto run = [fn = std::move(fn), next](const Future& self) {
    try {
      // CUDA (the RFC): fn runs on pool streams that wait on this future's
      // events, and the next future's events are recorded on them after fn.
      auto events = self.deviceEvents();
      if (events.empty()) {
        next->complete(fn(self));
        return;
      }
      std::vector<std::unique_ptr<DeviceEvent::StreamScope>> scopes;
      for (auto& e : events) scopes.push_back(e->enterPoolStream());
      c10::IValue value = fn(self);
      {
        std::lock_guard<std::mutex> lock(next->mu);
        for (auto& e : events) next->events.push_back(e->recordOnCurrentStream());
      }
      scopes.clear();
      next->complete(std::move(value));
    } catch (...) {
      next->fail(std::current_exception());
    }
  };
  addInlineCallback([run, pool](const Future& self) {
    // No pool (a future made by fromValue): run here, as there is no other thread.
    if (pool == nullptr || !pool->submit([run, self] { run(self); })) run(self);
  });
  return Future(next);
}

std::vector<std::shared_ptr<DeviceEvent>> Future::deviceEvents() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->events;
}

std::vector<c10::IValue> waitAll(const std::vector<Future>& futures) {
  for (const auto& f : futures) f.wait();
  std::vector<c10::IValue> values;
  values.reserve(futures.size());
  for (const auto& f : futures) values.push_back(f.value());
  return values;
}

Future collectAll(const std::vector<Future>& futures) {
  auto all = std::make_shared<detail::FutureState>();
  if (futures.empty()) {
    all->complete(c10::IValue());
    return Future(all);
  }
  auto left = std::make_shared<std::atomic<size_t>>(futures.size());
  for (const auto& f : futures) {
    f.addInlineCallback([all, left](const Future&) {
      if (left->fetch_sub(1) == 1) all->complete(c10::IValue());
    });
  }
  return Future(all);
}

Promise::Promise() : state_(std::make_shared<detail::FutureState>()) {}
Future Promise::future() const {
  return Future(state_);
}
bool Promise::setValue(c10::IValue value) const {
  return state_->complete(std::move(value));
}
bool Promise::setError(std::exception_ptr error) const {
  return state_->fail(std::move(error));
}

}  // namespace rpcjob::runtime
