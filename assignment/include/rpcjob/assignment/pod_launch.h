#pragma once
// What a pod's launcher starts: the contract between the operator, which writes
// it into the pod (env RPCJOB_POD_WORKERS of the pod's one worker container), and
// `rpcjob-launch` (runner/), which reads it and runs each worker as a process.
// Why one container runs several workers: operator/README.md ("Pods").
//
// Format (JSON, read as YAML):
//   {"workers": [{"name": "master", "argv": ["rpcjob-worker", "model-split"],
//                 "env": [{"name": "RPCJOB_WORKER_NAME", "value": "master"}, ...]},
//                ...]}
// `argv` is the worker's command and args as the template wrote them: $(VAR)
// references are still unexpanded (the kubelet expands only the container's own
// command), the launcher expands them from the worker's environment. `env` is put
// on top of the container's environment, in order (a later entry wins).
//
// Pure: no I/O. Thread-safety: functions of their arguments only.

#include <string>
#include <utility>
#include <vector>

namespace rpcjob {

// The variable that carries the launch spec into the pod's container.
inline constexpr const char* kEnvPodWorkers = "RPCJOB_POD_WORKERS";
// Where the launcher writes its report (the container's terminationMessagePath);
// the operator reads it back from the container status.
inline constexpr const char* kEnvTerminationLog = "RPCJOB_TERMINATION_LOG";
inline constexpr const char* kDefaultTerminationLog = "/dev/termination-log";

struct PodWorker {
  std::string name;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
};

struct PodLaunch {
  std::vector<PodWorker> workers;
};

bool operator==(const PodWorker& a, const PodWorker& b);
bool operator==(const PodLaunch& a, const PodLaunch& b);

// One line of JSON.
std::string toJson(const PodLaunch& launch);
// Throws AssignmentError (rpcjob/assignment/assignment.h) saying what is wrong:
// not JSON/YAML, no workers, a worker without a name or argv, a name twice.
PodLaunch parsePodLaunch(const std::string& text);

// What the launcher reports when it ends (the termination message), one entry
// per worker of the pod. `failed`: the worker whose exit ended the pod ("" when
// all succeeded or the pod was stopped).
struct WorkerExit {
  std::string name;
  int exitCode = 0;  // a signal N is reported as 128 + N, as a shell and the kubelet do
  int signal = 0;    // 0: exited
  int restarts = 0;
};
struct PodReport {
  std::vector<WorkerExit> workers;
  std::string failed;
};
bool operator==(const WorkerExit& a, const WorkerExit& b);
bool operator==(const PodReport& a, const PodReport& b);

// One line of JSON, at most 4096 bytes (the kubelet's limit for a termination
// message): workers beyond what fits are dropped, the failed one kept first.
std::string toJson(const PodReport& report);
// Throws AssignmentError when `text` is not a report.
PodReport parsePodReport(const std::string& text);

}  // namespace rpcjob
