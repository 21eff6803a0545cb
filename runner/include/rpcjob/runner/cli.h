#pragma once
// The `rpcjob` command line:
//
//   rpcjob validate JOB.yaml
//   rpcjob plan JOB.yaml --nodes NODES.yaml [--output table|yaml]
//   rpcjob run JOB.yaml [--worker-binary PATH] [--run-dir DIR] [--first-port N]
//                       [--gpus N] [--grace-period SECONDS]
//   rpcjob --version | --help
//
// Exit codes: 0 success (the job succeeded; the manifest is valid; the plan is
// Planned); 1 the job failed (a worker failed past backoffLimit, or the deadline
// passed); 2 usage error, unreadable or invalid manifest, or a job that does not
// fit (Unschedulable); 130 / 143 `rpcjob run` was stopped by SIGINT / SIGTERM.

#include <string>
#include <vector>

namespace rpcjob::runner {

inline constexpr int kExitOk = 0;
inline constexpr int kExitJobFailed = 1;
inline constexpr int kExitUsage = 2;

// args without the program name.
int runCli(const std::vector<std::string>& args);

}  // namespace rpcjob::runner
