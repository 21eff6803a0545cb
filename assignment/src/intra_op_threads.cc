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

}  // namespace rpcjob
