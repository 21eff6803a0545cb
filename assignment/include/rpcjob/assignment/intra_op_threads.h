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
//
// With the share comes OMP_WAIT_POLICY=PASSIVE: libgomp's idle threads otherwise
// spin after every parallel region, and an RPC worker's cores also run its
// transport (TensorPipe's loops, the copy threads): 2 x 8 spinning threads on 16
// cores made the recipe's CPU mode take 0.135-0.151 s, passive 0.073 s, 4 threads
// 0.074 s (one H200 host, benchmarks/results/2026-11-24-h200x1-threads.md).

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace rpcjob {

inline constexpr const char* kEnvOmpNumThreads = "OMP_NUM_THREADS";
inline constexpr const char* kEnvOmpWaitPolicy = "OMP_WAIT_POLICY";

// 0 when libtorch's default is already the share. visibleCores <= 0: not known
// (a pod's, seen from the operator): a limit alone decides, and without one the
// answer is 0. cpuLimitMilli <= 0 means no limit.
int intraOpThreads(int visibleCores, int workersSharing, int64_t cpuLimitMilli = 0);

// The variables a worker is given for `threads` (intraOpThreads' answer), where
// `isSet` says what its template or inherited environment sets already: none when
// OMP_NUM_THREADS is set there (the user chose) or threads is 0; else
// OMP_NUM_THREADS and, unless set, OMP_WAIT_POLICY=PASSIVE.
std::vector<std::pair<std::string, std::string>> intraOpEnvironment(
    int threads, const std::function<bool(const std::string&)>& isSet);

}  // namespace rpcjob
