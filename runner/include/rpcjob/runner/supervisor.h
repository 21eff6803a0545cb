#pragma once
// Runs the workers of one job as local processes and applies the run policy
// (run_policy.h): the I/O edge of `rpcjob run`.
//
//  - Each worker runs in its own process group (setpgid), with stdin from
//    /dev/null, its stdout and stderr read through pipes and written to ours line
//    by line with a "[name] " prefix (and raw to <runDir>/<name>.log), and
//    PR_SET_PDEATHSIG so that it dies if rpcjob itself is killed with SIGKILL.
//  - One thread, one poll(2) loop over the workers' pipes and a self-pipe that the
//    SIGCHLD, SIGINT and SIGTERM handlers write to; no work in signal handlers.
//  - Stopping (restart, deadline, interrupt): SIGTERM to every worker's process
//    group, SIGKILL to the groups still alive after the grace period (at once on
//    a second SIGINT/SIGTERM). When the job ends, every group gets a SIGKILL
//    anyway, so that nothing a worker started (a shell's children) outlives it.
//  - Status: on a terminal, a status line redrawn in place below the workers'
//    output; otherwise a status line whenever the counts change and every
//    statusInterval.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rpcjob/runner/launch.h"
#include "rpcjob/runner/run_policy.h"

namespace rpcjob::runner {

struct SupervisorOptions {
  std::string jobName;
  int backoffLimit = 0;
  std::optional<int64_t> activeDeadlineSeconds;
  std::chrono::milliseconds gracePeriod{5000};
  std::chrono::milliseconds statusInterval{5000};
  bool liveStatus = false;  // redraw one status line in place (stdout is a terminal)
};

struct WorkerRun {
  std::string name;
  int rank = -1;
  ExitStatus status;  // of its last launch
  int restarts = 0;   // launches - 1
};

struct SupervisorResult {
  JobPhase phase = JobPhase::Failed;
  std::string reason;
  std::string message;
  int interruptSignal = 0;  // SIGINT/SIGTERM that stopped the job; 0 otherwise
  // Index in `workers` of the worker whose failure stopped the last attempt; -1
  // when none did (success, deadline, interrupt).
  int failedWorker = -1;
  std::vector<WorkerRun> workers;
  double seconds = 0;
};

// Blocks until the job has ended and every worker process is gone.
SupervisorResult supervise(const std::vector<WorkerLaunch>& workers,
                           const SupervisorOptions& options);

}  // namespace rpcjob::runner
