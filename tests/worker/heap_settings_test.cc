// rpcjob-worker's heap settings (worker/tools/heap_settings.h): memory freed
// after a burst stays in the process's heap instead of going back to the
// kernel, so the next burst does not fault it in again. Each case runs in a
// fresh process (this program again, RPCJOB_HEAP_BURST set): malloc's settings
// and its history are process-wide.

#include <malloc.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "heap_settings.h"

extern char** environ;

namespace {

// In the fresh process, before main: 8 MiB in 64 KiB blocks (under the mmap
// threshold, so from the main heap), freed in reverse; exits 0 when the heap
// kept at least 6 MiB of it, 1 when it gave it back, 2 when the settings were
// refused.
const int kBurst = [] {
  const char* mode = std::getenv("RPCJOB_HEAP_BURST");
  if (mode == nullptr) return 0;
  if (std::strcmp(mode, "keep") == 0 && !rpcjob::worker::keepFreedHeap()) ::_exit(2);
  std::vector<void*> blocks;
  blocks.reserve(128);  // nothing allocated between the blocks and the heap's top
  for (int i = 0; i < 128; ++i) blocks.push_back(std::malloc(64 << 10));
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
  ::_exit(mallinfo2().arena >= (6u << 20) ? 0 : 1);
}();

int burstInFreshProcess(const char* mode) {
  std::string env = std::string("RPCJOB_HEAP_BURST=") + mode;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(env.data());
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char* argv[] = {self, nullptr};
  pid_t pid = 0;
  if (::posix_spawn(&pid, self, nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(HeapSettings, FreedHeapStaysForTheNextBurst) {
  EXPECT_EQ(burstInFreshProcess("keep"), 0);
}

TEST(HeapSettings, WithoutThemGlibcGivesItBack) {
  // What the settings change: in a fresh process the same burst's memory goes
  // back to the kernel when it is freed.
  EXPECT_EQ(burstInFreshProcess("default"), 1);
}

}  // namespace
