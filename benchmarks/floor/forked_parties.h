#pragma once
// What the floor programs whose parties are forked processes share
// (rpcjob-lane-floor, rpcjob-same-gpu-floor, rpcjob-recipe-floor,
// rpcjob-nvlink-floor): one block of memory the parties see across fork(), the
// wait for their exits, two parties run as processes or threads, and the GPU
// floors' percentiles and arguments.
// Header-only: the programs link different sets (the lane's ring, the CUDA
// runtime, libtorch) and nothing else in common.

#include <signal.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace rpcjob::floor {

// A T built in an anonymous shared mapping: children forked after this share
// it. Null, said on stderr with `program`'s name, when it cannot be mapped.
template <class T>
T* newShared(const char* program) {
  void* mem = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror((std::string(program) + ": mmap").c_str());
    return nullptr;
  }
  return new (mem) T();
}

// Waits for every child in `children`; whether each exited 0.
template <size_t N>
bool reap(const pid_t (&children)[N]) {
  bool ok = true;
  for (pid_t c : children) {
    int status = 0;
    waitpid(c, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

// Runs party(0) and party(1) to the end: as two forked processes, each of which
// exits 1 when `failed` is set and is killed after `alarmSeconds` (a party that
// never gets its turn must not hang the run), or as two threads of this one.
// Whether both ended with `failed` unset.
template <class Party>
bool runParties(bool processes, unsigned alarmSeconds, const std::atomic<int>& failed,
                Party party) {
  if (!processes) {
    std::thread other([&] { party(1); });
    party(0);
    other.join();
    return failed.load() == 0;
  }
  pid_t children[2];
  for (int me = 0; me < 2; ++me) {
    children[me] = fork();
    if (children[me] < 0) {
      std::perror("fork");
      if (me == 1) {  // the first would wait for its peer until its alarm
        kill(children[0], SIGKILL);
        waitpid(children[0], nullptr, 0);
      }
      return false;
    }
    if (children[me] == 0) {
      alarm(alarmSeconds);
      party(me);
      std::fflush(stderr);
      _exit(failed.load() ? 1 : 0);
    }
  }
  return reap(children);
}

// The 10th, 50th and 90th percentiles of a measurement's samples.
struct Spread {
  double p10 = 0, p50 = 0, p90 = 0;
};
inline Spread spreadOf(std::vector<double> samples) {
  if (samples.empty()) return {};
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    return samples[static_cast<size_t>(q * static_cast<double>(samples.size() - 1))];
  };
  return Spread{at(0.1), at(0.5), at(0.9)};
}

// The GPU floors' arguments, `--rounds N` (1..maxRounds) and `--json`, into
// `rounds` (which holds the default) and `json`. False, with the usage said on
// stderr, for anything else.
inline bool parseRoundsAndJson(int argc, char** argv, const char* program, int maxRounds,
                               int& rounds, bool& json) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N (1..%d)] [--json]\n", program, maxRounds);
      return false;
    }
  }
  if (rounds < 1 || rounds > maxRounds) {
    std::fprintf(stderr, "%s: --rounds must be 1..%d\n", program, maxRounds);
    return false;
  }
  return true;
}

}  // namespace rpcjob::floor
