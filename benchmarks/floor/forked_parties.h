#pragma once
// What the floor programs whose parties are forked processes share
// (rpcjob-lane-floor, rpcjob-same-gpu-floor, rpcjob-recipe-floor): one block of
// memory the parties see across fork(), and the wait for their exits.
// Header-only: the programs link different sets (the lane's ring, the CUDA
// runtime, libtorch) and nothing else in common.

#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cstddef>
#include <cstdio>
#include <new>
#include <string>

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

}  // namespace rpcjob::floor
