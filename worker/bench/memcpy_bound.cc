#include "memcpy_bound.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace rpcjob::bench {
namespace {

using CopyFn = void (*)(char* to, const char* from, size_t bytes);

void memcpyCopy(char* to, const char* from, size_t bytes) {
  std::memcpy(to, from, bytes);
}

void cmaCopy(char* to, const char* from, size_t bytes) {
  // read(2)'s per-call cap applies to process_vm_readv as well.
  constexpr size_t kMaxPerCall = 0x7ffff000;
  for (size_t done = 0; done < bytes;) {
    const size_t want = std::min(bytes - done, kMaxPerCall);
    iovec local{to + done, want};
    iovec remote{const_cast<char*>(from) + done, want};
    const ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
    if (n <= 0) throw std::runtime_error("process_vm_readv on ourselves failed");
    done += static_cast<size_t>(n);
  }
}

double copySeconds(CopyFn copy, char* to, const char* from, size_t bytes, int threads) {
  const auto start = std::chrono::steady_clock::now();
  if (threads <= 1) {
    copy(to, from, bytes);
  } else {
    std::vector<std::thread> workers;
    const size_t slice = (bytes + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
      const size_t begin = std::min(bytes, slice * t), end = std::min(bytes, begin + slice);
      workers.emplace_back([=] { copy(to + begin, from + begin, end - begin); });
    }
    for (auto& w : workers) w.join();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

CopyBound best(CopyFn copy, char* to, const char* from, size_t bytes, int threads, int rounds) {
  CopyBound top;
  for (int n : {1, threads}) {
    for (int r = 0; r < rounds; ++r) {
      const double gbps = static_cast<double>(bytes) / copySeconds(copy, to, from, bytes, n) / 1e9;
      if (gbps > top.gbps) top = {gbps, n};
    }
  }
  return top;
}

// `n` threads copying their slices of one buffer into another each time `go`
// moves on, counting themselves in `done`; the caller may be slice 0 itself.
class SpinningGroup {
 public:
  SpinningGroup(const char* from, char* to, size_t bytes, int n, int firstHelper)
      : from_(from), to_(to), bytes_(bytes), slice_((bytes + n - 1) / n) {
    for (int t = firstHelper; t < n; ++t) {
      helpers_.emplace_back([this, t] {
        for (int seen = 0;;) {
          int now;
          while ((now = go_.load(std::memory_order_acquire)) == seen) {
            if (stop_.load(std::memory_order_acquire)) return;
          }
          seen = now;
          copySlice(t);
          done_.fetch_add(1, std::memory_order_acq_rel);
        }
      });
    }
  }
  ~SpinningGroup() {
    stop_.store(true, std::memory_order_release);
    for (auto& h : helpers_) h.join();
  }
  void copySlice(int t) const {
    const size_t begin = std::min(bytes_, slice_ * t), end = std::min(bytes_, begin + slice_);
    std::memcpy(to_ + begin, from_ + begin, end - begin);
  }
  void start(int round) {
    done_.store(0, std::memory_order_release);
    go_.store(round, std::memory_order_release);
  }
  void waitFor(int helpers) const {
    while (done_.load(std::memory_order_acquire) < helpers) {
    }
  }

 private:
  const char* from_;
  char* to_;
  size_t bytes_, slice_;
  std::atomic<int> go_{0}, done_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> helpers_;
};

}  // namespace

CopyBound measureCopyBound(size_t bytes, int threads, int rounds) {
  std::unique_ptr<char[]> from(new char[bytes]), to(new char[bytes]);
  std::memset(from.get(), 1, bytes);  // touched: no page faults in the timed copies
  std::memset(to.get(), 0, bytes);
  return best(memcpyCopy, to.get(), from.get(), bytes, threads, rounds);
}

CopyBound measureCopyBoundPooled(size_t bytes, int threads, int rounds) {
  std::unique_ptr<char[]> from(new char[bytes]), to(new char[bytes]);
  std::memset(from.get(), 1, bytes);
  std::memset(to.get(), 0, bytes);
  CopyBound top;
  for (int n : {1, threads}) {
    n = std::max(1, n);
    SpinningGroup group(from.get(), to.get(), bytes, n, 1);  // this thread is its slice 0
    for (int r = 1; r <= rounds; ++r) {
      const auto start = std::chrono::steady_clock::now();
      group.start(r);
      group.copySlice(0);
      group.waitFor(n - 1);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double gbps = static_cast<double>(bytes) / seconds / 1e9;
      if (gbps > top.gbps) top = {gbps, n};
    }
  }
  return top;
}

CopyBound measureCopyPingPong(size_t bytes, int threads, int rounds) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  int n = std::max(1, threads);
  if (cores > 0 && 2 * n > cores) n = std::max(1, cores / 2);
  std::unique_ptr<char[]> a(new char[bytes]), b(new char[bytes]);
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 0, bytes);
  CopyBound top;
  {
    SpinningGroup there(a.get(), b.get(), bytes, n, 1);  // this thread is its slice 0
    SpinningGroup back(b.get(), a.get(), bytes, n, 0);
    for (int r = 1; r <= rounds + 1; ++r) {  // the first pair only warms up
      const auto start = std::chrono::steady_clock::now();
      there.start(r);
      there.copySlice(0);
      there.waitFor(n - 1);
      back.start(r);
      back.waitFor(n);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double gbps = 2.0 * static_cast<double>(bytes) / seconds / 1e9;
      if (r > 1 && gbps > top.gbps) top = {gbps, n};
    }
  }
  return top;
}

CopyBound measureCmaCopy(size_t bytes, int threads, int rounds) {
  std::unique_ptr<char[]> from(new char[bytes]);
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return {};
  ::madvise(mapped, bytes, MADV_HUGEPAGE);
  char* to = static_cast<char*>(mapped);
  std::memset(from.get(), 1, bytes);
  std::memset(to, 0, bytes);
  CopyBound top;
  try {
    top = best(cmaCopy, to, from.get(), bytes, threads, rounds);
  } catch (const std::exception&) {  // seccomp: no figure rather than a wrong one
    top = {};
  }
  ::munmap(mapped, bytes);
  return top;
}

int copyChannelThreads() {
  const char* env = std::getenv("RPCJOB_MTCMA_THREADS");
  if (env != nullptr && std::atoi(env) > 0) return std::atoi(env);
  return static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace rpcjob::bench
