#pragma once
// What `rpcjob run` starts for each worker, computed from the job and its plan
// without touching the system (the supervisor does the starting):
//
//  - the program: the group's template command + args (its first container);
//    without a command, the worker program with the args, and without either,
//    `rpcjob-worker serve` (the worker image's default). A command named
//    `rpcjob-worker` runs the worker program found next to `rpcjob` (or given
//    with --worker-binary): the image's program, built here. Any other command
//    runs as written: a bare name is looked up on PATH (as in a container), a
//    relative path (`build/my-program`) is taken from the manifest's folder, so
//    a manifest and the build it names run the same from any directory.
//    $(VAR) references in command and args expand from the container's
//    environment as on Kubernetes ($$ is a literal $; unknown references stay
//    as written), before the command is resolved.
//  - the environment: this process's, then the template's `env` entries that
//    have literal values (valueFrom needs an API server: skipped, with a note),
//    then the variables every pod gets (rpcjob/assignment/environment.h), which
//    win over the template's; and OMP_NUM_THREADS (the worker's share of the
//    machine's cores, context.intraOpThreads) with OMP_WAIT_POLICY=PASSIVE
//    (rpcjob/assignment/intra_op_threads.h), where neither the template nor
//    context.inherited sets OMP_NUM_THREADS.

#include <string>
#include <utility>
#include <vector>

#include "rpcjob/api/types.h"
#include "rpcjob/planner/plan.h"

namespace rpcjob::runner {

inline constexpr const char* kWorkerProgram = "rpcjob-worker";

struct LaunchContext {
  std::string workerBinary;    // path of rpcjob-worker; empty: look it up on PATH
  std::string runDir;          // where the assignment, metrics and logs go
  std::string assignmentPath;  // the assignment file (in runDir)
  std::string manifestDir;     // relative command paths start here; empty: the working directory
  std::string secretPath;      // the run's secret file (RPCJOB_SECRET_FILE); empty: none
  int intraOpThreads = 0;      // OMP_NUM_THREADS for each worker; 0: leave it as inherited
  std::vector<std::string> inherited{};  // variables set in rpcjob's own environment
};

struct WorkerLaunch {
  std::string name;
  int rank = -1;
  std::string address;  // host:port of its RPC listener
  int metricsPort = 0;
  std::string metricsFile;
  std::string logFile;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // set on top of rpcjob's own
};

struct Launches {
  std::vector<WorkerLaunch> workers;  // by rank
  std::vector<std::string> notes;     // skipped env entries and the like
};

// `plan` must be Planned.
Launches buildLaunches(const api::RpcJob& job, const planner::Plan& plan,
                       const LaunchContext& context);

// The program `command` names: a relative path with a folder in it resolved
// against `manifestDir`; absolute paths and bare names (PATH) as they are.
std::string resolveCommand(const std::string& command, const std::string& manifestDir);

// Whether `env` has an entry named `name`.
bool setsVariable(const std::vector<std::pair<std::string, std::string>>& env,
                  const std::string& name);

// Kubernetes' $(VAR) expansion.
std::string expandReferences(const std::string& text,
                             const std::vector<std::pair<std::string, std::string>>& env);

}  // namespace rpcjob::runner
