#include "startup/start_plan.h"

namespace rpcjob::runtime {

const char* toString(StartPipes mode) {
  switch (mode) {
    case StartPipes::kAuto:
      return "auto";
    case StartPipes::kFullMesh:
      return "full-mesh";
    case StartPipes::kLeaderBarrier:
      return "leader";
    case StartPipes::kLazy:
      return "lazy";
  }
  return "?";
}

namespace startup {

std::optional<StartPipes> parseStartPipes(const std::string& text) {
  for (StartPipes mode :
       {StartPipes::kAuto, StartPipes::kFullMesh, StartPipes::kLeaderBarrier, StartPipes::kLazy}) {
    if (text == toString(mode)) return mode;
  }
  return std::nullopt;
}

StartPipes resolve(StartPipes requested, int workers, int fullMeshMaxWorkers) {
  if (requested != StartPipes::kAuto) return requested;
  return workers <= fullMeshMaxWorkers ? StartPipes::kFullMesh : StartPipes::kLeaderBarrier;
}

std::uint64_t pipesAtStart(StartPipes resolved, int workers, int rank) {
  const auto n = static_cast<std::uint64_t>(workers > 0 ? workers : 0);
  switch (resolved) {
    case StartPipes::kFullMesh:
      return 2 * n;
    case StartPipes::kLeaderBarrier:
      if (n <= 1) return 0;
      return rank == 0 ? n - 1 : 1;
    case StartPipes::kAuto:  // unresolved: the worst case
      return 2 * n;
    case StartPipes::kLazy:
      return 0;
  }
  return 2 * n;
}

std::uint64_t fdsNeeded(std::uint64_t pipes) {
  return kFdsBase + pipes * kFdsPerPipe;
}

std::string fdLimitProblem(const std::string& worker, StartPipes resolved, int workers,
                           std::uint64_t pipes, std::uint64_t need, std::uint64_t soft,
                           std::uint64_t hard) {
  if (need <= soft) return "";
  std::string fix =
      "raise the hard limit (ulimit -Hn as root, the container runtime's nofile "
      "limit, LimitNOFILE= of a systemd unit)";
  if (resolved == StartPipes::kFullMesh) {
    fix +=
        ", or start with fewer pipes (RuntimeOptions::startPipes = kLeaderBarrier, "
        "RPCJOB_START_PIPES=leader)";
  }
  return "worker '" + worker + "': starting " + std::to_string(workers) + " workers with " +
         toString(resolved) + " opens " + std::to_string(pipes) + " pipes here at once, about " +
         std::to_string(need) + " file descriptors, but this process may open only " +
         std::to_string(soft) + " (RLIMIT_NOFILE, soft limit raised to the hard limit " +
         std::to_string(hard) + "): " + fix;
}

std::string pipeFdProblem(const std::string& peer, std::uint64_t open, std::uint64_t soft) {
  // Room for this pipe and one a peer opens to us meanwhile.
  if (open + 2 * kFdsPerPipe <= soft) return "";
  return "no pipe opened to worker '" + peer + "': " + std::to_string(open) + " of the " +
         std::to_string(soft) + " file descriptors this process may open (RLIMIT_NOFILE) are in " +
         "use, and a pipe needs about " + std::to_string(kFdsPerPipe) +
         "; raise the hard limit or call fewer workers";
}

}  // namespace startup
}  // namespace rpcjob::runtime
