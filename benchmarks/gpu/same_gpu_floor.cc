// rpcjob-same-gpu-floor: what a hand-off between two processes that share one
// GPU costs, with no RPC runtime, no TensorPipe and no libtorch: the bound
// under every CUDA round trip of two workers placed on one GPU
// (workersPerGpu 2: the recipe's "CUDA RPC" mode and the pipeline's shards on
// a one-GPU machine).
//
// Two parties pass a turn back and forth through shared memory, spinning. On
// its turn a party does its step, then hands the turn over; a round trip is
// two turns. The parties are two processes (fork before CUDA is touched, so
// each has its own CUDA context, as two workers do) or, for comparison, two
// threads of one process (one context). Steps:
//   host   no GPU work: the cost of the turn itself
//   tiny   a 4-byte cudaMemsetAsync on the party's stream, an event recorded
//          after it, cudaEventQuery until it completes (what the runtime's
//          EventPoller does)
//   copy   a 4 MB device-to-device copy from the other party's buffer
//          (cudaIpcOpenMemHandle'd in process mode), then the same wait: one
//          hop of a 4 MB tensor, as cuda_nvlink moves it on a shared GPU
//   one    party 0 does `tiny`, party 1 only hands the turn back (its
//          context exists but stays idle): is the cost per context switch?
//   ipc    `tiny` with an interprocess event, handed over at once; the next
//          party first polls that event (cudaEventQuery on the opened handle,
//          as cuda_nvlink's receiver on a shared GPU does)
// Then, processes only: does a process that polls an event of the other slow
// the other's GPU work down? Party 1 runs a burst of large memsets and records
// an interprocess event; party 0 waits on shared memory (idle), or spins
// cudaEventQuery on that event. The burst's time, as party 1 sees it.
//
//   rpcjob-same-gpu-floor [--rounds N] [--json]
//
// Exit codes: 0 success, 1 a CUDA call or a child failed, 2 usage.

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../floor/forked_parties.h"

namespace {

using rpcjob::floor::reap;
using rpcjob::floor::Spread;
using rpcjob::floor::spreadOf;

constexpr size_t kCopyBytes = size_t{4} << 20;
constexpr int kMaxRounds = 100000;

enum class Step { kHost, kTiny, kCopy, kOne, kIpc };
const char* name(Step s) {
  switch (s) {
    case Step::kHost:
      return "host";
    case Step::kTiny:
      return "tiny";
    case Step::kCopy:
      return "copy";
    case Step::kOne:
      return "one";
    case Step::kIpc:
      return "ipc";
  }
  return "?";
}

// In memory both parties see (MAP_SHARED before the fork in process mode).
struct Shared {
  std::atomic<uint64_t> turn{0};  // even: party 0 acts, odd: party 1
  std::atomic<int> exported{0};   // parties whose buffer handle is in `memory`
  std::atomic<int> failed{0};
  cudaIpcMemHandle_t memory[2];
  cudaIpcEventHandle_t events[2];
  std::atomic<int> eventsExported{0};
  std::atomic<int> polling{0};  // interference: party 0 polls now
  void* pointer[2];             // thread mode: the buffers themselves
  cudaEvent_t threadEvents[2];
  double roundTripUs[kMaxRounds];
};

bool check(cudaError_t e, const char* what, Shared* s) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  s->failed.store(1);
  return false;
}

// One party's side of `rounds` round trips (plus a warm-up); party 0 records
// each round trip's time.
void party(int me, Step step, bool processes, int warmup, int rounds, Shared* s) {
  const bool gpu = step != Step::kHost && !(step == Step::kOne && me == 1);
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  cudaEvent_t theirsReady = nullptr;  // kIpc: the other party's event
  void* mine = nullptr;
  void* theirs = nullptr;
  if (gpu) {
    const unsigned flags =
        cudaEventDisableTiming | (step == Step::kIpc && processes ? cudaEventInterprocess : 0);
    if (!check(cudaSetDevice(0), "cudaSetDevice", s) ||
        !check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream", s) ||
        !check(cudaEventCreateWithFlags(&done, flags), "event", s) ||
        !check(cudaMalloc(&mine, kCopyBytes), "cudaMalloc", s)) {
      return;
    }
    if (step == Step::kIpc) {
      if (processes) {
        if (!check(cudaIpcGetEventHandle(&s->events[me], done), "cudaIpcGetEventHandle", s)) return;
      } else {
        s->threadEvents[me] = done;
      }
      s->eventsExported.fetch_add(1);
      while (s->eventsExported.load() < 2 && s->failed.load() == 0) std::this_thread::yield();
      if (processes) {
        if (!check(cudaIpcOpenEventHandle(&theirsReady, s->events[1 - me]),
                   "cudaIpcOpenEventHandle", s)) {
          return;
        }
      } else {
        theirsReady = s->threadEvents[1 - me];
      }
    }
    if (step == Step::kCopy) {
      if (processes) {
        if (!check(cudaIpcGetMemHandle(&s->memory[me], mine), "cudaIpcGetMemHandle", s)) return;
      } else {
        s->pointer[me] = mine;
      }
      s->exported.fetch_add(1);
      while (s->exported.load() < 2 && s->failed.load() == 0) std::this_thread::yield();
      if (processes) {
        if (!check(cudaIpcOpenMemHandle(&theirs, s->memory[1 - me], cudaIpcMemLazyEnablePeerAccess),
                   "cudaIpcOpenMemHandle", s)) {
          return;
        }
      } else {
        theirs = s->pointer[1 - me];
      }
    }
  }
  const int total = warmup + rounds;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < total; ++r) {
    const uint64_t mine_turn = 2 * static_cast<uint64_t>(r) + static_cast<uint64_t>(me);
    while (s->turn.load(std::memory_order_acquire) != mine_turn) {
      if (s->failed.load(std::memory_order_relaxed)) return;
    }
    if (me == 0) {
      auto now = std::chrono::steady_clock::now();
      if (r > warmup) {
        s->roundTripUs[r - warmup - 1] =
            std::chrono::duration<double, std::micro>(now - start).count();
      }
      start = now;
    }
    if (step == Step::kIpc) {
      // The other party handed over at once: wait for its work here, on the host.
      cudaError_t e;
      while ((e = cudaEventQuery(theirsReady)) == cudaErrorNotReady) {
      }
      if (!check(e, "cudaEventQuery (the other's event)", s)) return;
      cudaMemsetAsync(mine, r & 0xff, 4, stream);
      cudaEventRecord(done, stream);
    } else if (gpu) {
      if (step == Step::kCopy) {
        cudaMemcpyAsync(mine, theirs, kCopyBytes, cudaMemcpyDeviceToDevice, stream);
      } else {
        cudaMemsetAsync(mine, r & 0xff, 4, stream);
      }
      cudaEventRecord(done, stream);
      cudaError_t e;
      while ((e = cudaEventQuery(done)) == cudaErrorNotReady) {
      }
      if (!check(e, "cudaEventQuery", s)) return;
    }
    s->turn.store(mine_turn + 1, std::memory_order_release);
  }
  if (me == 0) {  // the last round trip ends when the turn comes back once more
    while (s->turn.load(std::memory_order_acquire) != 2 * static_cast<uint64_t>(total) &&
           s->failed.load() == 0) {
    }
    s->roundTripUs[rounds - 1] =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  if (theirs != nullptr && processes) cudaIpcCloseMemHandle(theirs);
  if (gpu) {
    cudaStreamSynchronize(stream);
    if (theirsReady != nullptr && processes) cudaEventDestroy(theirsReady);
    cudaFree(mine);
    cudaEventDestroy(done);
    cudaStreamDestroy(stream);
  }
}

// Runs one measurement; false when a party failed.
bool measure(Step step, bool processes, int rounds, Shared* s, Spread& out) {
  s->turn.store(0);
  s->exported.store(0);
  s->eventsExported.store(0);
  s->failed.store(0);
  const int warmup = 200;
  if (!rpcjob::floor::runParties(processes, 60, s->failed,
                                 [&](int me) { party(me, step, processes, warmup, rounds, s); })) {
    return false;
  }
  out = spreadOf(std::vector<double>(s->roundTripUs, s->roundTripUs + rounds));
  return true;
}

// Party 1's burst (kBurst memsets of kBurstBytes, then its interprocess
// event), kBursts times; party 0 meanwhile waits on shared memory or, with
// `poll`, spins cudaEventQuery on that event. The median burst in ms, or < 0.
constexpr int kBurst = 100;
constexpr size_t kBurstBytes = size_t{256} << 20;
constexpr int kBursts = 7;
constexpr uint64_t kNobody = ~uint64_t{0};

double interference(bool poll, Shared* s) {
  s->turn.store(kNobody);  // party 1 starts when party 0 says so, not before
  s->eventsExported.store(0);
  s->failed.store(0);
  pid_t children[2];
  for (int me = 0; me < 2; ++me) {
    children[me] = fork();
    if (children[me] != 0) continue;
    alarm(60);  // a party that never gets its turn must not hang the run
    if (me == 1) {
      void* buffer = nullptr;
      cudaStream_t stream = nullptr;
      cudaEvent_t done = nullptr;
      if (!check(cudaSetDevice(0), "cudaSetDevice", s) ||
          !check(cudaMalloc(&buffer, kBurstBytes), "cudaMalloc", s) ||
          !check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream", s) ||
          !check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming | cudaEventInterprocess),
                 "event", s) ||
          !check(cudaIpcGetEventHandle(&s->events[1], done), "cudaIpcGetEventHandle", s)) {
        _exit(1);
      }
      s->eventsExported.store(1);
      for (int k = -1; k < kBursts; ++k) {  // -1: the warm-up
        const uint64_t go = 2 * static_cast<uint64_t>(k + 1);
        while (s->turn.load(std::memory_order_acquire) != go) {
          if (s->failed.load()) _exit(1);
        }
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kBurst; ++i) cudaMemsetAsync(buffer, i & 0xff, kBurstBytes, stream);
        cudaEventRecord(done, stream);
        cudaError_t e;
        while ((e = cudaEventQuery(done)) == cudaErrorNotReady) {
        }
        if (!check(e, "cudaEventQuery", s)) _exit(1);
        if (k >= 0) {
          s->roundTripUs[k] =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
        }
        s->turn.store(go + 1, std::memory_order_release);
      }
      _exit(0);
    }
    cudaEvent_t theirs = nullptr;
    while (s->eventsExported.load() < 1) {
      if (s->failed.load()) _exit(1);
    }
    if (poll &&
        (!check(cudaSetDevice(0), "cudaSetDevice", s) ||
         !check(cudaIpcOpenEventHandle(&theirs, s->events[1]), "cudaIpcOpenEventHandle", s))) {
      _exit(1);
    }
    for (int k = -1; k < kBursts; ++k) {
      const uint64_t go = 2 * static_cast<uint64_t>(k + 1);
      s->turn.store(go, std::memory_order_release);
      while (s->turn.load(std::memory_order_acquire) != go + 1) {
        if (s->failed.load()) _exit(1);
        if (poll) cudaEventQuery(theirs);
      }
    }
    _exit(0);
  }
  if (!reap(children)) return -1;
  std::vector<double> v(s->roundTripUs, s->roundTripUs + kBursts);
  std::sort(v.begin(), v.end());
  return v[kBursts / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 2000;
  bool json = false;
  if (!rpcjob::floor::parseRoundsAndJson(argc, argv, "rpcjob-same-gpu-floor", kMaxRounds, rounds,
                                         json)) {
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out as it is measured
  alarm(600);
  auto* s = rpcjob::floor::newShared<Shared>("rpcjob-same-gpu-floor");
  if (s == nullptr) return 1;
  // The processes first: the parent must not touch CUDA before it forks.
  const Step steps[] = {Step::kHost, Step::kTiny, Step::kOne, Step::kIpc, Step::kCopy};
  std::string out = "{";
  if (!json) {
    std::printf("round trip (2 turns) between two parties on GPU 0, %d rounds, us\n", rounds);
    std::printf("%-10s %-6s %10s %10s %10s\n", "parties", "step", "p10", "p50", "p90");
  }
  double burst[2];
  for (bool poll : {false, true}) {
    burst[poll] = interference(poll, s);
    if (burst[poll] < 0) {
      std::fprintf(stderr, "interference (%s) failed\n", poll ? "polling" : "idle");
      return 1;
    }
  }
  if (json) {
    char text[160];
    std::snprintf(text, sizeof(text), "\"burst_idle_ms\": %.3f, \"burst_polled_ms\": %.3f",
                  burst[0], burst[1]);
    out += text;
  } else {
    std::printf(
        "a burst of %d memsets of %zu MiB in one process (median of %d, ms): %.3f with "
        "the other process idle, %.3f with it polling the burst's event\n",
        kBurst, kBurstBytes >> 20, kBursts, burst[0], burst[1]);
  }
  for (bool processes : {true, false}) {
    for (Step step : steps) {
      Spread r;
      if (!measure(step, processes, rounds, s, r)) {
        std::fprintf(stderr, "%s/%s failed\n", processes ? "processes" : "threads", name(step));
        return 1;
      }
      const std::string key = std::string(processes ? "processes" : "threads") + "_" + name(step);
      if (json) {
        char text[160];
        std::snprintf(
            text, sizeof(text), "%s\"%s_p50_us\": %.2f, \"%s_p10_us\": %.2f, \"%s_p90_us\": %.2f",
            out.size() > 1 ? ", " : "", key.c_str(), r.p50, key.c_str(), r.p10, key.c_str(), r.p90);
        out += text;
      } else {
        std::printf("%-10s %-6s %10.2f %10.2f %10.2f\n", processes ? "processes" : "threads",
                    name(step), r.p10, r.p50, r.p90);
      }
    }
  }
  if (json) std::printf("%s}\n", out.c_str());
  return 0;
}
