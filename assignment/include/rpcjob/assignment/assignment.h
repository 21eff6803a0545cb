#pragma once
// The assignment (the worker table): the one contract between the planner's users
// (the operator, the local runner) and the runtime. The operator publishes it in a
// per-job ConfigMap that every pod mounts; the local runner writes it to a file.
// Workers read their identity and their peers from it.
//
// It is YAML (JSON parses too). Format, version rpcjob.dev/v1alpha1:
//
//   apiVersion: rpcjob.dev/v1alpha1
//   kind: Assignment
//   job: {name: pipeline, namespace: default}
//   transports: [shm, uv]          # allowed, in priority order (empty: all viable)
//   channels: [cma, mpt, xth, basic]  # allowed, in priority order (empty: all viable)
//   workers:
//     - name: master               # unique, a DNS label
//       rank: 0                    # 0..N-1, each exactly once
//       group: master              # the RpcJob worker group it came from
//       address: 10.0.0.7:29500    # host:port of its RPC listener
//       metricsPort: 9400          # 0: no metrics endpoint
//       node: gpu-node-a           # where it runs (informational for the runtime)
//       pod: pipeline-master-0     # empty when run locally
//       gpus: [0]                  # CUDA device indices the worker uses
//       deviceMaps:                # peer -> {local device -> peer device}
//         worker0: {"cuda:0": "cuda:1"}
//       channels:                  # peer -> channels the planner expects that pair to use
//         worker0: [cuda_ipc, cma]
//
// This library has no libtorch or TensorPipe in it: the operator links it too.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rpcjob {

inline constexpr const char* kAssignmentApiVersion = "rpcjob.dev/v1alpha1";
inline constexpr const char* kAssignmentKind = "Assignment";

// A device is written as "cpu" or "cuda:N".
using DeviceMap = std::map<std::string, std::string>;

struct WorkerEntry {
  std::string name;
  int rank = -1;
  std::string group;
  std::string address;  // host:port
  int metricsPort = 0;
  std::string node;
  std::string pod;
  std::vector<int> gpus;
  std::map<std::string, DeviceMap> deviceMaps;               // by peer name
  std::map<std::string, std::vector<std::string>> channels;  // by peer name
};

struct Assignment {
  std::string jobName;
  std::string jobNamespace;
  std::vector<std::string> transports;
  std::vector<std::string> channels;
  std::vector<WorkerEntry> workers;  // ordered by rank

  int worldSize() const { return static_cast<int>(workers.size()); }
  const WorkerEntry* byName(const std::string& name) const;
  const WorkerEntry* byRank(int rank) const;
};

// Thrown for unreadable or inconsistent assignments. The message names the field,
// e.g. "assignment: workers[2].rank: rank 5 is outside 0..2".
class AssignmentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses and validates (see validateAssignment). Throws AssignmentError.
Assignment parseAssignment(const std::string& text);
Assignment loadAssignmentFile(const std::string& path);

// Serializes to the YAML format above; parseAssignment(toYaml(a)) == a.
std::string toYaml(const Assignment& assignment);
void writeAssignmentFile(const Assignment& assignment, const std::string& path);

// Checks the invariants every reader relies on: names unique and DNS labels, ranks
// 0..N-1 exactly once, addresses host:port, peers in deviceMaps/channels known and
// not the worker itself, devices well formed, device maps one-to-one. Sorts workers
// by rank. Throws AssignmentError naming the first problem.
void validateAssignment(Assignment& assignment);

// Parses "cpu" / "cuda:N". Returns nullopt when malformed. cpu -> -1.
std::optional<int> parseDevice(const std::string& device);

bool operator==(const WorkerEntry& a, const WorkerEntry& b);
bool operator==(const Assignment& a, const Assignment& b);

}  // namespace rpcjob
