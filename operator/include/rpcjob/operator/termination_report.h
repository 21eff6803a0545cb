#pragma once
// The report `rpcjob-launch` leaves when a pod of several workers ends
// (rpcjob/assignment/pod_launch.h's PodReport, in the container's termination
// message): which worker failed and every worker's exit code. The kubelet copies
// it to status.containerStatuses[].state.terminated.message. Pure: no I/O.

#include <optional>
#include <string>

#include "rpcjob/assignment/pod_launch.h"

namespace rpcjob::op {

// The first report found in the pod's container statuses; nullopt when there is
// none (a one-worker pod, a launcher killed before it wrote, a message that is
// not a report: the operator then falls back to the container's exit code).
std::optional<PodReport> podReportOf(const std::string& podJson);

// For the WorkerFailed condition: "worker shard exited with code 3 (pod workers:
// master 143, shard 3)"; nullopt when the report names no failed worker.
std::optional<std::string> workerFailureOf(const std::string& podJson);

}  // namespace rpcjob::op
