#include "startup/fd_limit.h"

#include <dirent.h>
#include <sys/resource.h>

#include "rpcjob/runtime/errors.h"
#include "startup/start_plan.h"

namespace rpcjob::runtime::startup {

FdLimit fdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  return {static_cast<std::uint64_t>(limit.rlim_cur), static_cast<std::uint64_t>(limit.rlim_max)};
}

FdLimit raiseFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    // Fails only where the hard limit is above what the kernel allows
    // (RLIM_INFINITY on some systems): then the soft limit stays as it was.
    setrlimit(RLIMIT_NOFILE, &raised);
  }
  return fdLimit();
}

std::uint64_t openFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  std::uint64_t count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count > 0 ? count - 1 : 0;  // not the directory's own descriptor
}

void reserveFdsForStart(const std::string& worker, StartPipes resolved, int workers, int rank) {
  const FdLimit limit = raiseFdLimit();
  const std::uint64_t pipes = pipesAtStart(resolved, workers, rank);
  const std::string problem =
      fdLimitProblem(worker, resolved, workers, pipes, fdsNeeded(pipes), limit.soft, limit.hard);
  if (!problem.empty()) throw RpcError(ErrorCode::kInvalidArgument, worker, problem);
}

std::string fdsForPipeProblem(const std::string& peer) {
  return pipeFdProblem(peer, openFds(), fdLimit().soft);
}

}  // namespace rpcjob::runtime::startup
