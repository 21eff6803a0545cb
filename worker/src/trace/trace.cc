#include "trace/trace.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace rpcjob::runtime::trace {

std::atomic<bool> gEnabled{false};

namespace {

struct Event {
  int64_t ns;
  const char* what;
  uint64_t id;
};

// One per thread, kept by the registry past the thread's end. Written by its
// thread alone; `count` is published after each event, so flush() may read
// while the thread goes on.
struct Buffer {
  static constexpr size_t kCapacity = size_t{1} << 15;
  long tid = 0;
  std::unique_ptr<Event[]> events{new Event[kCapacity]};
  std::atomic<size_t> count{0};
  size_t dropped = 0;
};

struct Registry {
  std::mutex mu;
  std::string dir;
  std::vector<std::shared_ptr<Buffer>> buffers;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

int64_t now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void flushAtExit() {
  flush();
}

// RPCJOB_TRACE at load: a program needs no code of its own to be traced.
[[maybe_unused]] const bool kFromEnvironment = [] {
  const char* dir = std::getenv("RPCJOB_TRACE");
  if (dir != nullptr && *dir != '\0') enable(dir);
  return true;
}();

}  // namespace

void record(const char* what, uint64_t id) {
  thread_local std::shared_ptr<Buffer> mine;
  if (!mine) {
    auto b = std::make_shared<Buffer>();
    b->tid = static_cast<long>(syscall(SYS_gettid));
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.buffers.push_back(b);
    mine = std::move(b);
  }
  size_t n = mine->count.load(std::memory_order_relaxed);
  if (n == Buffer::kCapacity) {
    ++mine->dropped;
    return;
  }
  mine->events[n] = Event{now(), what, id};
  mine->count.store(n + 1, std::memory_order_release);
}

void enable(const std::string& dir) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.dir.empty()) std::atexit(flushAtExit);
    r.dir = dir;
  }
  gEnabled.store(true, std::memory_order_relaxed);
}

bool flush() {
  if (!gEnabled.load(std::memory_order_relaxed)) return false;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const long pid = static_cast<long>(getpid());
  const std::string path = r.dir + "/trace-" + std::to_string(pid) + ".txt";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "rpcjob: RPCJOB_TRACE: cannot write %s\n", path.c_str());
    return false;
  }
  size_t dropped = 0;
  for (const auto& b : r.buffers) {
    const size_t n = b->count.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      const Event& e = b->events[i];
      std::fprintf(f, "%lld %ld %ld %s %llu\n", static_cast<long long>(e.ns), pid, b->tid, e.what,
                   static_cast<unsigned long long>(e.id));
    }
    dropped += b->dropped;
  }
  bool ok = std::fclose(f) == 0;
  if (dropped > 0) {
    std::fprintf(stderr, "rpcjob: RPCJOB_TRACE: %zu events dropped (%zu per thread at most)\n",
                 dropped, Buffer::kCapacity);
  }
  return ok;
}

}  // namespace rpcjob::runtime::trace
