#include "cuda_event_timer.h"

#include <cuda_runtime.h>

#include <tensorpipe/common/buffer.h>
#include <tensorpipe/common/cuda_buffer.h>
#include <tensorpipe/common/device.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace rpcjob::runtime::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// Tokens with this bit carry a steady-clock start (CPU buffers); the others
// name a Record.
constexpr std::uint64_t kHostToken = std::uint64_t{1} << 63;
// A transfer begun this long ago and never ended (it failed: the decorator
// calls end() only on success) gives its events back.
constexpr auto kStale = std::chrono::minutes(10);
// Between two polls of the events still running.
constexpr auto kPollInterval = std::chrono::microseconds(20);

std::uint64_t nowNanos() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

// Makes `device` current for the scope, when it is not already.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device && cudaSetDevice(device) == cudaSuccess) {
      switched_ = previous_ >= 0;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

struct Events {
  int device = 0;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
};

struct Record {
  Events events;
  cudaStream_t stream = nullptr;
  Clock::time_point begun;
};

struct Pending {
  std::uint64_t token;
  Record record;
  instrument::TransferReport report;
};

class CudaEventTimer final : public instrument::TransferTimer {
 public:
  CudaEventTimer() = default;

  ~CudaEventTimer() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (poller_.joinable()) poller_.join();
    // The runtime's TensorPipe context is closed and joined before the last
    // decorator (and so this timer) goes: nothing records any more. Whatever is
    // still pending is reported with the host's measure.
    for (auto& p : pending_) {
      p.report(std::chrono::duration<double>(Clock::now() - p.record.begun).count());
      destroy(p.record.events);
    }
    for (auto& [token, record] : begun_) destroy(record.events);
    for (auto& [device, events] : free_) {
      for (auto& e : events) destroy(e);
    }
  }

  std::uint64_t begin(const tensorpipe::Buffer& buffer) noexcept override {
    const tensorpipe::Device device = buffer.device();
    if (device.type != tensorpipe::kCudaDeviceType) return kHostToken | (nowNanos() >> 1);
    Record record;
    record.stream = buffer.unwrap<tensorpipe::CudaBuffer>().stream;
    record.begun = Clock::now();
    if (!acquire(device.index, record.events)) return kHostToken | (nowNanos() >> 1);
    {
      DeviceGuard guard(device.index);
      if (cudaEventRecord(record.events.start, record.stream) != cudaSuccess) {
        cudaGetLastError();
        release(record.events);
        return kHostToken | (nowNanos() >> 1);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t token = nextToken_++;
    begun_.emplace(token, record);
    if (!poller_.joinable()) poller_ = std::thread([this] { poll(); });
    return token;
  }

  void end(std::uint64_t token, instrument::TransferReport report) noexcept override {
    if (token & kHostToken) {
      const std::uint64_t start = (token & ~kHostToken) << 1;
      const std::uint64_t now = nowNanos();
      report(now > start ? static_cast<double>(now - start) * 1e-9 : 0.0);
      return;
    }
    Record record;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = begun_.find(token);
      if (it == begun_.end()) {
        // Reclaimed as stale: it lasted at least that long.
        report(std::chrono::duration<double>(kStale).count());
        return;
      }
      record = it->second;
      begun_.erase(it);
    }
    // Everything the channel enqueued on the stream precedes this event.
    bool recorded;
    {
      DeviceGuard guard(record.events.device);
      recorded = cudaEventRecord(record.events.stop, record.stream) == cudaSuccess;
      if (!recorded) cudaGetLastError();
    }
    if (!recorded) {
      report(std::chrono::duration<double>(Clock::now() - record.begun).count());
      release(record.events);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(Pending{token, record, report});
    }
    cv_.notify_one();
  }

 private:
  static void destroy(Events& e) {
    DeviceGuard guard(e.device);
    if (e.start) cudaEventDestroy(e.start);
    if (e.stop) cudaEventDestroy(e.stop);
    e.start = e.stop = nullptr;
  }

  bool acquire(int device, Events& out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& events = free_[device];
      if (!events.empty()) {
        out = events.back();
        events.pop_back();
        return true;
      }
    }
    DeviceGuard guard(device);
    out.device = device;
    if (cudaEventCreate(&out.start) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (cudaEventCreate(&out.stop) != cudaSuccess) {
      cudaGetLastError();
      cudaEventDestroy(out.start);
      return false;
    }
    return true;
  }

  void release(const Events& e) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[e.device].push_back(e);
  }

  // The poller: reports every pending transfer whose stop event completed.
  void poll() {
    std::unique_lock<std::mutex> lock(mu_);
    auto lastSweep = Clock::now();
    while (!stop_) {
      if (pending_.empty()) {
        cv_.wait_for(lock, std::chrono::seconds(1));
      }
      if (Clock::now() - lastSweep > std::chrono::seconds(10)) {
        lastSweep = Clock::now();
        sweepStale(lastSweep);
      }
      if (pending_.empty()) continue;
      std::deque<Pending> batch;
      batch.swap(pending_);
      lock.unlock();
      std::deque<Pending> running;
      std::vector<Events> done;
      for (auto& p : batch) {
        cudaError_t state = cudaEventQuery(p.record.events.stop);
        if (state == cudaErrorNotReady) {
          running.push_back(std::move(p));
          continue;
        }
        float ms = 0;
        double seconds;
        if (state == cudaSuccess &&
            cudaEventElapsedTime(&ms, p.record.events.start, p.record.events.stop) == cudaSuccess) {
          seconds = static_cast<double>(ms) * 1e-3;
        } else {
          cudaGetLastError();
          seconds = std::chrono::duration<double>(Clock::now() - p.record.begun).count();
        }
        p.report(seconds);
        done.push_back(p.record.events);
      }
      lock.lock();
      for (const auto& e : done) free_[e.device].push_back(e);
      if (!running.empty()) {
        // Oldest first, ahead of what came in meanwhile.
        for (auto it = running.rbegin(); it != running.rend(); ++it) {
          pending_.push_front(std::move(*it));
        }
        lock.unlock();
        std::this_thread::sleep_for(kPollInterval);
        lock.lock();
      }
    }
  }

  // Under mu_.
  void sweepStale(Clock::time_point now) {
    for (auto it = begun_.begin(); it != begun_.end();) {
      if (now - it->second.begun > kStale) {
        destroy(it->second.events);
        it = begun_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::uint64_t nextToken_ = 1;
  std::unordered_map<std::uint64_t, Record> begun_;
  std::deque<Pending> pending_;
  std::map<int, std::vector<Events>> free_;
  std::thread poller_;
};

}  // namespace

std::shared_ptr<instrument::TransferTimer> makeCudaEventTimer() {
  return std::make_shared<CudaEventTimer>();
}

}  // namespace rpcjob::runtime::cuda
