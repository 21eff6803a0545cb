#pragma once
// The table `rpcjob run` prints at the end: per worker its rank, how it ended,
// its restarts, and the bytes it sent and received per channel (from its final
// metrics file; "-" with "no metrics file" when the worker wrote none).

#include <string>
#include <vector>

#include "rpcjob/runner/metrics_file.h"
#include "rpcjob/runner/run_policy.h"

namespace rpcjob::runner {

struct WorkerSummary {
  std::string name;
  int rank = -1;
  ExitStatus status;
  int restarts = 0;
  ChannelTraffic traffic;
};

// "0 B", "512 B", "1.5 KiB", "400.0 MiB", "1.20 GiB".
std::string formatBytes(double bytes);

// One row per worker and channel (a worker without traffic gets one row), then
// the metrics-file warnings, if any.
std::string renderSummary(const std::vector<WorkerSummary>& workers);

}  // namespace rpcjob::runner
