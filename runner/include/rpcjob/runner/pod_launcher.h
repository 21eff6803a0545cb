#pragma once
// `rpcjob-launch`: the one process of a pod's worker container when the pod runs
// several workers (operator/README.md, "Pods"). It reads the pod's launch spec
// (rpcjob/assignment/pod_launch.h, env RPCJOB_POD_WORKERS), starts every worker
// as a process with the supervisor of `rpcjob run` (supervisor.h: process groups,
// "[name] " before each output line, SIGTERM then SIGKILL on stop), and ends the
// way the job's run policy needs: RPC workers cannot rejoin a running job one by
// one, so the first worker that fails stops the others and the launcher exits
// with that worker's code (the operator then restarts the whole job within
// backoffLimit, as for any failed pod). Before exiting it writes a report of
// every worker's exit (pod_launch.h's PodReport) to the container's termination
// message file, where the operator reads it from the pod's status.
//
// These functions are the pure part; tools/rpcjob_launch_main.cc is the I/O.

#include <string>
#include <utility>
#include <vector>

#include "rpcjob/assignment/pod_launch.h"
#include "rpcjob/runner/launch.h"
#include "rpcjob/runner/supervisor.h"

namespace rpcjob::runner {

// What the supervisor starts for each worker of `launch`: its env on top of
// `processEnv` (the container's), argv with $(VAR) expanded from the two, rank
// from its RPCJOB_RANK (-1 when absent), no log file (the pod's log is the
// output, prefixed). A worker that neither its env nor `processEnv` gives
// OMP_NUM_THREADS gets its share of the `visibleCores` among the pod's workers
// (rpcjob/assignment/intra_op_threads.h; the operator already put a CPU limit's
// share in its env).
std::vector<WorkerLaunch> podWorkerLaunches(
    const PodLaunch& launch, const std::vector<std::pair<std::string, std::string>>& processEnv,
    int visibleCores = 0);

// Every worker's last exit, and the one that ended the pod.
PodReport podReportOf(const SupervisorResult& result);

// The launcher's exit code: 0 when every worker succeeded; the failed worker's
// code (128 + signal for a signal); 128 + signal when the launcher was stopped
// (SIGTERM from the kubelet); else 1.
int podExitCode(const SupervisorResult& result);

}  // namespace rpcjob::runner
