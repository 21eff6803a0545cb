#include "receive_spares.h"

#include <c10/core/ScalarTypeToTypeMeta.h>
#include <c10/core/Storage.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

namespace rpcjob::runtime::cuda {

namespace {
struct Held {
  int device;
  size_t bytes;
  c10::DataPtr ptr;
  uint64_t age;  // when it was allocated: the oldest goes first
  bool is(int d, size_t b) const { return device == d && bytes == b; }
};
}  // namespace

struct ReceiveSpares::State {
  size_t budget = 0;
  Allocate allocate;
  mutable std::mutex mu;
  std::condition_variable wake;
  std::condition_variable idle;
  std::vector<std::pair<int, size_t>> wanted;  // hold() requests the thread has not seen
  std::vector<Held> held;
  size_t heldBytes = 0;
  uint64_t clock = 0;
  uint64_t taken = 0;
  uint64_t missed = 0;
  bool busy = false;
  bool quit = false;     // the thread is to end (stop() or quiesce())
  bool stopped = false;  // for good: no thread again
  std::thread thread;    // started by a hold() that finds none
  std::mutex ending;     // one stop() or quiesce() at a time

  // Buffers of exactly `bytes` on `device` held now (mu held).
  size_t countOf(int device, size_t bytes) const {
    return static_cast<size_t>(std::count_if(held.begin(), held.end(),
                                             [&](const Held& h) { return h.is(device, bytes); }));
  }
  void run();
  // One batch of requests; mu held on entry and exit, released while allocating.
  void serve(std::unique_lock<std::mutex>& lock, std::vector<std::pair<int, size_t>> batch);
};

at::Tensor tensorOnBuffer(c10::DataPtr buffer, size_t bytes, const std::vector<int64_t>& sizes,
                          c10::ScalarType dtype, c10::Allocator* allocator, c10::DispatchKey key) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(buffer), allocator,
                       /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(key), c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

size_t ReceiveSpares::budgetFrom(const char* value, std::string& problem) {
  if (value == nullptr || *value == '\0') return kDefaultBudget;
  size_t bytes = 0;
  for (const char* c = value; *c != '\0'; ++c) {
    const bool digit = *c >= '0' && *c <= '9';
    const auto d = static_cast<size_t>(*c - '0');
    if (!digit || bytes > (SIZE_MAX - d) / 10) {
      problem = std::string("RPCJOB_RECEIVE_SPARE_BYTES='") + value + "' is not " +
                (digit ? "a byte count this machine can hold" : "a byte count (decimal digits)") +
                "; receive buffers held ahead stay at " + std::to_string(kDefaultBudget) + " bytes";
      return kDefaultBudget;
    }
    bytes = bytes * 10 + d;
  }
  return bytes;
}

ReceiveSpares::ReceiveSpares(size_t budget, Allocate allocate) : state_(std::make_shared<State>()) {
  state_->budget = budget;
  state_->allocate = std::move(allocate);
}

// Ends the thread (after an allocation in progress) and drops what it was still
// asked; `release`: what is held goes back to its allocator too.
void ReceiveSpares::endThread(State& state, bool forever, bool release) {
  std::lock_guard<std::mutex> one(state.ending);
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    if (forever) state.stopped = true;
    state.quit = true;
    state.wanted.clear();
    thread.swap(state.thread);
  }
  state.wake.notify_all();
  if (thread.joinable()) thread.join();
  std::vector<Held> released;  // freed outside the lock: the allocator's own
  {
    std::lock_guard<std::mutex> lock(state.mu);
    state.quit = false;
    if (release) {
      released.swap(state.held);
      state.heldBytes = 0;
    }
  }
  state.idle.notify_all();
}

ReceiveSpares::~ReceiveSpares() {
  stop();
}

void ReceiveSpares::stop() {
  endThread(*state_, /*forever=*/true, /*release=*/false);
}

void ReceiveSpares::quiesce() {
  endThread(*state_, /*forever=*/false, /*release=*/true);
}

size_t ReceiveSpares::budget() const {
  return state_->budget;
}

c10::DataPtr ReceiveSpares::take(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto& held = state_->held;
  auto it =
      std::find_if(held.begin(), held.end(), [&](const Held& h) { return h.is(device, bytes); });
  if (it == held.end()) {
    if (bytes >= kMinBytes && state_->budget > 0) state_->missed++;
    return {};
  }
  c10::DataPtr ptr = std::move(it->ptr);
  state_->heldBytes -= it->bytes;
  held.erase(it);
  state_->taken++;
  return ptr;
}

void ReceiveSpares::hold(const std::vector<std::pair<int, size_t>>& received) {
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->stopped || state_->quit) return;
    for (const auto& r : received) {
      if (r.second < kMinBytes || r.second > state_->budget) continue;
      state_->wanted.push_back(r);
      any = true;
    }
    if (any && !state_->thread.joinable()) {
      try {
        state_->thread = std::thread([state = state_] { state->run(); });
      } catch (const std::system_error&) {
        state_->wanted.clear();  // no thread to be had: the receives allocate as before
        return;
      }
    }
  }
  if (any) state_->wake.notify_one();
}

void ReceiveSpares::settle() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->idle.wait(lock,
                    [&] { return state_->quit || (state_->wanted.empty() && !state_->busy); });
}

ReceiveSpares::Stats ReceiveSpares::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return Stats{state_->taken, state_->missed, state_->held.size(), state_->heldBytes};
}

size_t ReceiveSpares::held(int device, size_t bytes) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->countOf(device, bytes);
}

void ReceiveSpares::State::run() {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    wake.wait(lock, [&] { return quit || !wanted.empty(); });
    if (quit) break;
    std::vector<std::pair<int, size_t>> batch;
    batch.swap(wanted);
    busy = true;
    serve(lock, std::move(batch));
    busy = false;
    idle.notify_all();
  }
  idle.notify_all();
}

void ReceiveSpares::State::serve(std::unique_lock<std::mutex>& lock,
                                 std::vector<std::pair<int, size_t>> batch) {
  // How many of each size the message received: that many are held after.
  std::map<std::pair<int, size_t>, size_t> want;
  for (const auto& key : batch) want[key]++;
  std::vector<c10::DataPtr> released;  // freed outside the lock: the allocator's own
  for (const auto& [key, count] : want) {
    const auto [device, bytes] = key;
    size_t have = countOf(device, bytes);
    // Sizes this message did not ask for may go to make room, oldest first; none
    // goes unless that makes room (else a size the budget cannot take would
    // cost the others theirs, message after message).
    const auto evictable = [&](const Held& h) { return want.count({h.device, h.bytes}) == 0; };
    for (; have < count && !quit; ++have) {
      size_t freeable = 0;
      for (const Held& h : held) freeable += evictable(h) ? h.bytes : 0;
      if (heldBytes - freeable + bytes > budget) break;
      while (heldBytes + bytes > budget) {
        auto oldest = held.end();
        for (auto it = held.begin(); it != held.end(); ++it) {
          if (evictable(*it) && (oldest == held.end() || it->age < oldest->age)) oldest = it;
        }
        heldBytes -= oldest->bytes;
        released.push_back(std::move(oldest->ptr));
        held.erase(oldest);
      }
      heldBytes += bytes;  // reserved while allocating: only this thread adds
      lock.unlock();
      released.clear();
      c10::DataPtr ptr;
      try {
        ptr = allocate(device, bytes);
      } catch (...) {
        ptr = c10::DataPtr();  // out of memory: the receive allocates as before
      }
      lock.lock();
      if (!ptr) {
        heldBytes -= bytes;
        break;
      }
      held.push_back(Held{device, bytes, std::move(ptr), ++clock});
    }
  }
  if (!released.empty()) {
    lock.unlock();
    released.clear();
    lock.lock();
  }
}

}  // namespace rpcjob::runtime::cuda
