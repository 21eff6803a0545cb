#pragma once
// The assignment (the worker table): the one contract between the planner's users
// (the operator, the local runner) and the runtime. The operator publishes it in a
// per-job ConfigMap that every pod mounts; the local runner writes it to a file.
// Workers read their identity and their peers from it.
//
// It is YAML (JSON parses too). It grows linearly with the workers: each worker
// carries where it is, the nodes their link capabilities, the job its allowed
// transports/channels and device-map mode; the per-pair channels and device maps
// are derived from those by one pure function (pair_links.h) that the planner (for
// status and `rpcjob plan`) and the runtime both call. Only the user's explicit
// device maps (spec.deviceMaps.maps) are carried per pair.
//
// Format, version rpcjob.dev/v1alpha2:
//
//   apiVersion: rpcjob.dev/v1alpha2
//   kind: Assignment
//   job: {name: pipeline, namespace: default}
//   transports: [shm, uv]          # allowed, in priority order (empty: all viable)
//   channels: [cma, mpt, xth, basic]  # allowed, in priority order (empty: all viable)
//   deviceMapMode: Auto            # Auto: every pair of GPU workers with a cuda channel
//                                  # gets a map; Explicit: only the explicit maps
//   nodes:                         # link capabilities of the nodes used (absent: none)
//     gpu-node-a: [rdma, nvlink]
//   workers:
//     - name: master               # unique, a DNS label
//       rank: 0                    # 0..N-1, each exactly once
//       group: master              # the RpcJob worker group it came from
//       address: 10.0.0.7:29500    # host:port of its RPC listener
//       metricsPort: 9400          # 0 (or absent): no metrics endpoint
//       node: gpu-node-a           # where it runs
//       pod: pipeline-master-0     # absent when run locally (workers of one node share)
//       gpus: [0]                  # CUDA device indices the worker's process sees
//       explicitDeviceMaps:        # the spec's explicit maps from this worker, in
//         worker0: {"cuda:0": "cuda:1"}  # the indices both processes see
//
// The earlier version, rpcjob.dev/v1alpha1, carried `deviceMaps` and `channels` for
// every ordered pair in every worker. It is still read: its `deviceMaps` are taken
// as the complete explicit set (mode Explicit) and its per-pair `channels` are
// ignored (they were informational; the runtime chooses among the allowed ones).
// A runtime of that release refuses this version by its apiVersion: the operator,
// the local runner and the runtime are released together.
//
// This library has no libtorch or TensorPipe in it: the operator links it too.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace rpcjob {

inline constexpr const char* kAssignmentApiVersion = "rpcjob.dev/v1alpha2";
// Read for compatibility (see above), never written.
inline constexpr const char* kAssignmentPerPairApiVersion = "rpcjob.dev/v1alpha1";
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
  // The user's maps from this worker, by peer name; every other pair's map is
  // derived (deviceMapsOf in pair_links.h).
  std::map<std::string, DeviceMap> explicitDeviceMaps;
};

enum class DeviceMapMode { Auto, Explicit };

// What a node offers links between workers on different nodes (or, for NVLink,
// between the GPUs of one node). Capability names in the format: rdma, nvlink.
struct NodeLinks {
  bool rdma = false;    // both ends RDMA: ibv and cuda_gdr
  bool nvlink = false;  // GPUs connected by NVLink (informational: cuda_ipc and
                        // cuda_nvlink work over PCIe peer-to-peer too)
};
bool operator==(const NodeLinks& a, const NodeLinks& b);

struct Assignment {
  std::string jobName;
  std::string jobNamespace;
  std::vector<std::string> transports;
  std::vector<std::string> channels;
  DeviceMapMode deviceMapMode = DeviceMapMode::Auto;
  std::map<std::string, NodeLinks> nodes;  // by node name; a node not listed has none
  std::vector<WorkerEntry> workers;        // ordered by rank

  int worldSize() const { return static_cast<int>(workers.size()); }
  const WorkerEntry* byName(const std::string& name) const;
  const WorkerEntry* byRank(int rank) const;
  NodeLinks linksOf(const std::string& node) const;
};

// Thrown for unreadable or inconsistent assignments. The message names the field,
// e.g. "assignment: workers[2].rank: rank 5 is outside 0..2".
class AssignmentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses and validates (see validateAssignment); in the current version, also
// that explicit maps given both ways are each the inverse of the other. Throws
// AssignmentError.
Assignment parseAssignment(const std::string& text);
Assignment loadAssignmentFile(const std::string& path);

// Serializes to the YAML format above; parseAssignment(toYaml(a)) == a.
std::string toYaml(const Assignment& assignment);
void writeAssignmentFile(const Assignment& assignment, const std::string& path);

// Checks the invariants every reader relies on: names unique and DNS labels, ranks
// 0..N-1 exactly once, addresses host:port, peers of explicit maps known and not
// the worker itself, devices well formed, maps one-to-one. Sorts workers by rank.
// Throws AssignmentError naming the first problem.
void validateAssignment(Assignment& assignment);

// Parses "cpu" / "cuda:N". Returns nullopt when malformed. cpu -> -1.
std::optional<int> parseDevice(const std::string& device);

bool operator==(const WorkerEntry& a, const WorkerEntry& b);
bool operator==(const Assignment& a, const Assignment& b);

}  // namespace rpcjob
