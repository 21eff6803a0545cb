#pragma once
// How many intra-op threads (OMP_NUM_THREADS) a worker gets when neither its
// template nor the environment it is started from sets them.
//
// libtorch sizes its intra-op pool to every core the process sees. Several
// workers on one machine (one `rpcjob run`, or one pod of workersPerPod Auto)
// each start a pool that size, and their spinning threads take turns on the
// cores: the CUDA RPC recipe's CPU mode ran 2.3x slower that way on a 16-core
// host (benchmarks/results/2026-11-24-h200x1-merged.md). So each worker gets
// its share:
//   - a CPU limit (resources.limits.cpu) caps the threads: floor(limit), at
//     least 1; threads beyond the quota only wait for the next CFS period;
//   - else the cores it sees, divided evenly among the workers that share them,
//     at least 1.
// One worker alone on its cores without a limit keeps libtorch's default
// (every core); intraOpThreads then returns 0, "leave it unset".

#include <cstdint>

namespace rpcjob {

inline constexpr const char* kEnvOmpNumThreads = "OMP_NUM_THREADS";

// 0 when libtorch's default is already the share. visibleCores <= 0: not known
// (a pod's, seen from the operator): a limit alone decides, and without one the
// answer is 0. cpuLimitMilli <= 0 means no limit.
int intraOpThreads(int visibleCores, int workersSharing, int64_t cpuLimitMilli = 0);

}  // namespace rpcjob
