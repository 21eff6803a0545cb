#include "event_poller.h"

#include "../spin_wait.h"
#include "cuda_error.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace rpcjob::runtime::cuda {

struct EventPoller::State {
  struct Waiting {
    cudaEvent_t event;
    int device;
    Callback callback;
  };

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool sleeping = false;           // under mu: the thread waits on cv
  std::atomic<size_t> arrived{0};  // incoming.size(), polled unlocked while spinning
  AdaptiveSpin spin;               // long while events keep coming
  std::deque<Waiting> incoming;
  std::thread thread;

  void run() {
    std::vector<Waiting> waiting;
    int current = -1;
    for (;;) {
      // Idle: spin briefly first (spin_wait.h), since the next transfer's
      // event often follows within microseconds; a whenComplete meanwhile
      // then needs no wake-up.
      const bool idle = waiting.empty();
      std::chrono::steady_clock::time_point idleSince;
      if (idle) {
        idleSince = std::chrono::steady_clock::now();
        spinUntil([&] { return arrived.load(std::memory_order_acquire) > 0; }, spin.budget());
      }
      {
        std::unique_lock<std::mutex> lock(mu);
        if (waiting.empty() && incoming.empty() && !stop) {
          sleeping = true;
          cv.wait(lock, [&] { return stop || !incoming.empty(); });
          sleeping = false;
        }
        if (stop) break;
        for (auto& w : incoming) waiting.push_back(std::move(w));
        incoming.clear();
        arrived.store(0, std::memory_order_release);
      }
      if (idle) spin.idleEnded(idleSince);
      bool progressed = false;
      for (size_t i = 0; i < waiting.size();) {
        if (waiting[i].device != current) {
          cudaSetDevice(waiting[i].device);
          current = waiting[i].device;
        }
        cudaError_t e = cudaEventQuery(waiting[i].event);
        if (e == cudaErrorNotReady) {
          ++i;
          continue;
        }
        std::string error;
        if (e != cudaSuccess) {
          cudaGetLastError();
          error = cudaWhat("cudaEventQuery", e);
        }
        Waiting done = std::move(waiting[i]);
        waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
        done.callback(error);
        progressed = true;
      }
      if (!progressed && !waiting.empty()) std::this_thread::yield();
    }
    std::deque<Waiting> left;
    {
      std::lock_guard<std::mutex> lock(mu);
      left.swap(incoming);
    }
    for (auto& w : waiting) w.callback("event poller stopped");
    for (auto& w : left) w.callback("event poller stopped");
  }
};

EventPoller::EventPoller() : state_(std::make_shared<State>()) {}

EventPoller::~EventPoller() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->thread.joinable()) {
    if (state_->thread.get_id() == std::this_thread::get_id()) {
      state_->thread.detach();  // the last owner let go inside a callback
    } else {
      state_->thread.join();
    }
  }
}

void EventPoller::whenComplete(cudaEvent_t event, int device, Callback callback) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->stop) {
      state_->incoming.push_back({event, device, std::move(callback)});
      state_->arrived.store(state_->incoming.size(), std::memory_order_release);
      wake = state_->sleeping;
      if (!state_->thread.joinable()) state_->thread = std::thread([s = state_] { s->run(); });
      callback = nullptr;
    }
  }
  if (callback) {
    callback("event poller stopped");
    return;
  }
  if (wake) state_->cv.notify_one();
}

}  // namespace rpcjob::runtime::cuda
