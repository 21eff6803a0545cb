// rpcjob-nvlink-floor: a CUDA tensor's round trip between two processes on two
// GPUs as cuda_nvlink moves it, with no RPC runtime, no TensorPipe and no
// libtorch: the bound under rpcjob-gpu-bench's 400 MB and 4 MB round trips that
// two processes leave, beside the one-process copies gpu_bench times (issue 20).
//
// Party 0 owns a buffer on cuda:0, party 1 one on cuda:1, and each a "ready"
// event. A round trip, timed by party 0 on the host:
//   party 0: records "ready" on its stream, hands the turn over;
//   party 1: makes its stream wait on party 0's "ready", copies party 0's buffer
//            into its own (a pull, over the peer mapping), records its own
//            "ready" and hands the turn back at once (the reply's host steps
//            run while the copy does, as the runtime's do);
//   party 0: makes its stream wait on party 1's "ready", copies back (a pull),
//            and waits for its stream.
// The turn passes through shared memory, spinning (~0.3 us). Modes:
//   processes  two processes (forked before CUDA is touched, so each has its own
//              context, as two workers do): memory and events through their
//              interprocess handles, cuda_nvlink's protocol and nothing more
//   plain      two threads, ordinary events (gpu_bench's "pulled both ways")
// What `processes` costs above `plain` is what two processes cost; what the
// runtime costs above `processes` is ours. (A third mode, two threads using the
// interprocess events directly, segfaulted on 2 x H200 with CUDA 13, as a
// gpu_bench variant doing the same had: dropped, not chased.)
//
//   rpcjob-nvlink-floor [--rounds N] [--json]
//
// Exit codes: 0 success (also on a machine with fewer than two GPUs: it says
// so), 1 a CUDA call or a child failed, 2 usage.

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../floor/forked_parties.h"

namespace {

using rpcjob::floor::reap;
using rpcjob::floor::Spread;
using rpcjob::floor::spreadOf;

constexpr int kMaxRounds = 10000;

// The two modes (above): forked processes, or "plain", two threads of this one.
const char* name(bool processes) {
  return processes ? "processes" : "plain";
}

// In memory both parties see (MAP_SHARED before the fork in process mode).
struct Shared {
  std::atomic<uint64_t> turn{0};  // 2r: party 0 starts round r; 2r+1: party 1 copies
  std::atomic<int> exported{0};   // parties whose buffer and event are published
  std::atomic<int> finished{0};   // barriers passed by the parties at the end, two each
  std::atomic<int> failed{0};
  std::atomic<int> devices{-1};  // the probe's count
  cudaIpcMemHandle_t memory[2];
  cudaIpcEventHandle_t events[2];
  void* pointer[2];  // plain mode: the buffers and events themselves
  cudaEvent_t threadEvents[2];
  double roundTripUs[kMaxRounds];
};

bool check(cudaError_t e, const char* what, Shared* s) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "rpcjob-nvlink-floor: %s: %s\n", what, cudaGetErrorString(e));
  s->failed.store(1);
  return false;
}

// Spins until the turn is `want`; false when the other party failed.
bool awaitTurn(Shared* s, uint64_t want) {
  while (s->turn.load(std::memory_order_acquire) != want) {
    if (s->failed.load(std::memory_order_relaxed)) return false;
  }
  return true;
}

void party(int me, bool processes, size_t bytes, int warmup, int rounds, Shared* s) {
  const unsigned flags =
      cudaEventDisableTiming | (processes ? unsigned{cudaEventInterprocess} : 0u);
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;
  cudaEvent_t theirsReady = nullptr;
  void* mine = nullptr;
  void* theirs = nullptr;
  if (!check(cudaSetDevice(me), "cudaSetDevice", s) ||
      !check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream", s) ||
      !check(cudaEventCreateWithFlags(&ready, flags), "event", s) ||
      !check(cudaMalloc(&mine, bytes), "cudaMalloc", s) ||
      !check(cudaMemset(mine, me + 1, bytes), "cudaMemset", s) ||
      !check(cudaDeviceSynchronize(), "cudaMemset's end", s)) {
    return;
  }
  if (processes) {
    if (!check(cudaIpcGetMemHandle(&s->memory[me], mine), "cudaIpcGetMemHandle", s) ||
        !check(cudaIpcGetEventHandle(&s->events[me], ready), "cudaIpcGetEventHandle", s)) {
      return;
    }
  } else {
    cudaError_t e = cudaDeviceEnablePeerAccess(1 - me, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
    } else if (!check(e, "cudaDeviceEnablePeerAccess", s)) {
      return;
    }
    s->pointer[me] = mine;
    s->threadEvents[me] = ready;
  }
  s->exported.fetch_add(1);
  while (s->exported.load() < 2) {
    if (s->failed.load()) return;
  }
  if (processes) {
    if (!check(cudaIpcOpenMemHandle(&theirs, s->memory[1 - me], cudaIpcMemLazyEnablePeerAccess),
               "cudaIpcOpenMemHandle", s) ||
        !check(cudaIpcOpenEventHandle(&theirsReady, s->events[1 - me]), "cudaIpcOpenEventHandle",
               s)) {
      return;
    }
  } else {
    theirs = s->pointer[1 - me];
    theirsReady = s->threadEvents[1 - me];
  }
  const int total = warmup + rounds;
  for (int r = 0; r < total; ++r) {
    const auto round = static_cast<uint64_t>(r);
    if (me == 0) {
      if (!awaitTurn(s, 2 * round)) return;
      const auto start = std::chrono::steady_clock::now();
      cudaEventRecord(ready, stream);
      s->turn.store(2 * round + 1, std::memory_order_release);
      if (!awaitTurn(s, 2 * round + 2)) return;
      cudaStreamWaitEvent(stream, theirsReady, 0);
      cudaMemcpyAsync(mine, theirs, bytes, cudaMemcpyDeviceToDevice, stream);
      if (!check(cudaGetLastError(), "the copy back", s) ||
          !check(cudaStreamSynchronize(stream), "the copy back's end", s)) {
        return;
      }
      if (r >= warmup) {
        s->roundTripUs[r - warmup] =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count();
      }
    } else {
      if (!awaitTurn(s, 2 * round + 1)) return;
      cudaStreamWaitEvent(stream, theirsReady, 0);
      cudaMemcpyAsync(mine, theirs, bytes, cudaMemcpyDeviceToDevice, stream);
      cudaEventRecord(ready, stream);
      if (!check(cudaGetLastError(), "the copy there", s)) return;
      s->turn.store(2 * round + 2, std::memory_order_release);
    }
  }
  if (!check(cudaStreamSynchronize(stream), "the last copy", s)) return;
  // The other's stream may still wait on our event or read our buffer until it
  // has synchronized too, and its mapping of our buffer must be closed before
  // the buffer is freed: two barriers.
  const auto barrier = [&](int past) {
    s->finished.fetch_add(1);
    while (s->finished.load() < past) {
      if (s->failed.load()) return false;
    }
    return true;
  };
  if (!barrier(2)) return;
  if (processes) {
    cudaIpcCloseMemHandle(theirs);
    cudaEventDestroy(theirsReady);
  }
  if (!barrier(4)) return;
  cudaFree(mine);
  cudaEventDestroy(ready);
  cudaStreamDestroy(stream);
}

// One measurement; false when a party failed.
bool measure(bool processes, size_t bytes, int rounds, Shared* s, Spread& out) {
  s->turn.store(0);
  s->exported.store(0);
  s->finished.store(0);
  s->failed.store(0);
  const int warmup = 5;
  if (!rpcjob::floor::runParties(processes, 120, s->failed,
                                 [&](int me) { party(me, processes, bytes, warmup, rounds, s); })) {
    return false;
  }
  out = spreadOf(std::vector<double>(s->roundTripUs, s->roundTripUs + rounds));
  return true;
}

// The GPU count, asked in a child: the parent must not touch CUDA before it forks.
int probeDevices(Shared* s) {
  pid_t child[1] = {fork()};
  if (child[0] < 0) {
    std::perror("rpcjob-nvlink-floor: fork");
    return -1;
  }
  if (child[0] == 0) {
    int n = 0;
    s->devices.store(cudaGetDeviceCount(&n) == cudaSuccess ? n : 0);
    _exit(0);
  }
  reap(child);
  return s->devices.load();
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 50;
  bool json = false;
  if (!rpcjob::floor::parseRoundsAndJson(argc, argv, "rpcjob-nvlink-floor", kMaxRounds, rounds,
                                         json)) {
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  alarm(600);
  auto* s = rpcjob::floor::newShared<Shared>("rpcjob-nvlink-floor");
  if (s == nullptr) return 1;
  const int devices = probeDevices(s);
  if (devices < 0) return 1;
  if (devices < 2) {
    if (json) {
      std::printf("{\"skipped\": \"needs two GPUs, %d here\"}\n", devices);
    } else {
      std::printf("rpcjob-nvlink-floor: needs two GPUs, %d here\n", devices);
    }
    return 0;
  }
  struct Size {
    const char* label;
    size_t bytes;
    int rounds;
  };
  // The 4 MB round trip takes ~100 times fewer microseconds: ten times the rounds.
  const Size sizes[] = {{"400mb", size_t{400} * 1000 * 1000, rounds},
                        {"4mb", size_t{4} << 20, std::min(kMaxRounds, 10 * rounds)}};
  std::string out = "{";
  if (!json) {
    std::printf("round trip cuda:0 -> cuda:1 -> cuda:0, pulled both ways, us\n");
    std::printf("%-6s %-10s %10s %10s %10s\n", "size", "mode", "p10", "p50", "p90");
  }
  // The processes first: the parent must not touch CUDA before it forks.
  for (bool processes : {true, false}) {
    for (const Size& size : sizes) {
      Spread r;
      if (!measure(processes, size.bytes, size.rounds, s, r)) {
        std::fprintf(stderr, "rpcjob-nvlink-floor: %s/%s failed\n", name(processes), size.label);
        return 1;
      }
      if (json) {
        char text[200];
        const std::string key = std::string(name(processes)) + "_" + size.label;
        std::snprintf(
            text, sizeof(text), "%s\"%s_p50_us\": %.1f, \"%s_p10_us\": %.1f, \"%s_p90_us\": %.1f",
            out.size() > 1 ? ", " : "", key.c_str(), r.p50, key.c_str(), r.p10, key.c_str(), r.p90);
        out += text;
      } else {
        std::printf("%-6s %-10s %10.1f %10.1f %10.1f\n", size.label, name(processes), r.p10, r.p50,
                    r.p90);
      }
    }
  }
  if (json) std::printf("%s}\n", out.c_str());
  return 0;
}
