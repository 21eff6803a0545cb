#include "rpcjob/assignment/intra_op_threads.h"

#include <algorithm>

namespace rpcjob {

int intraOpThreads(int visibleCores, int workersSharing, int64_t cpuLimitMilli) {
  const int workers = std::max(workersSharing, 1);
  if (cpuLimitMilli > 0) {
    const int64_t limited = std::max<int64_t>(cpuLimitMilli / 1000, 1);
    if (visibleCores <= 0) return static_cast<int>(std::min<int64_t>(limited, 1 << 16));
    if (workers == 1 && limited >= visibleCores) return 0;  // the default fits the quota
    return static_cast<int>(std::min<int64_t>(limited, visibleCores));
  }
  if (workers == 1 || visibleCores <= 0) return 0;
  return std::max(visibleCores / workers, 1);
}

std::vector<std::pair<std::string, std::string>> intraOpEnvironment(
    int threads, const std::function<bool(const std::string&)>& isSet) {
  std::vector<std::pair<std::string, std::string>> env;
  if (threads <= 0 || isSet(kEnvOmpNumThreads)) return env;
  env.emplace_back(kEnvOmpNumThreads, std::to_string(threads));
  if (!isSet(kEnvOmpWaitPolicy)) env.emplace_back(kEnvOmpWaitPolicy, "PASSIVE");
  return env;
}

}  // namespace rpcjob
