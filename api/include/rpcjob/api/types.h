#pragma once
// The RpcJob resource, rpcjob.dev/v1alpha1, as plain C++ values.
//
// Only the parts of a worker group's PodTemplateSpec that the planner and the
// validator read are modelled; the whole template is kept as a JSON string
// (PodTemplate::json) for the operator to build pods from. Fields hold the values
// after defaulting (defaults.h); optional<> marks fields that have no default.
//
// Thread-safety: plain values; no shared state.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rpcjob/api/defaults.h"

namespace rpcjob::api {

inline constexpr const char* kGroup = "rpcjob.dev";
inline constexpr const char* kVersion = "v1alpha1";
inline constexpr const char* kApiVersion = "rpcjob.dev/v1alpha1";
inline constexpr const char* kKind = "RpcJob";
inline constexpr const char* kPlural = "rpcjobs";

struct ObjectMeta {
  std::string name;
  std::string namespaceName;  // empty: "default" for the operator, unused by the runner
  std::string uid;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
};

// Required node affinity: a node matches when any term matches; a term matches
// when all its expressions do (the Kubernetes rules).
enum class SelectorOperator { In, NotIn, Exists, DoesNotExist };
struct NodeSelectorRequirement {
  std::string key;
  SelectorOperator op = SelectorOperator::In;
  std::vector<std::string> values;
};
struct NodeSelectorTerm {
  std::vector<NodeSelectorRequirement> matchExpressions;
};

// A toleration; operator "Equal" or "Exists", effect "" (any), NoSchedule,
// PreferNoSchedule or NoExecute.
struct Toleration {
  std::string key;
  std::string op = "Equal";
  std::string value;
  std::string effect;
};

struct Container {
  std::string name;
  std::string image;
  std::vector<std::string> command;
  std::vector<std::string> args;
  // Kubernetes quantities as written ("500m", "1Gi"); empty when not set.
  std::string cpuRequest;
  std::string memoryRequest;
};

struct PodTemplate {
  std::string json = "{}";  // the whole PodTemplateSpec, canonical JSON
  std::map<std::string, std::string> nodeSelector;
  std::vector<Toleration> tolerations;
  std::vector<NodeSelectorTerm> requiredNodeAffinity;  // empty: no constraint
  std::vector<Container> containers;
};

struct WorkerGroup {
  std::string name;
  int replicas = kDefaultReplicas;
  int gpusPerWorker = kDefaultGpusPerWorker;
  PodTemplate podTemplate;  // "template" in the manifest
};

enum class PlacementPolicy { Pack, Spread };
enum class WorkersPerPod { One, Auto };  // manifest: "1" | "Auto"
struct Placement {
  PlacementPolicy policy = PlacementPolicy::Pack;
  WorkersPerPod workersPerPod = WorkersPerPod::One;
  // How many workers of one node share one GPU (time-sliced, each its own process):
  // 1 gives every worker GPUs of its own; N > 1 gives the GPU workers of a node (or
  // pod) one GPU per N, in rank order, so neighbours share. Needs gpusPerWorker <= 1
  // and, on Kubernetes, workersPerPod Auto (pods cannot share a GPU).
  int workersPerGpu = 1;
};

// One explicit device map, from one worker to another by worker name. Devices are
// "cuda:k" where k counts the worker's own GPUs (0..gpusPerWorker-1): the planner
// translates them to the device indices the worker's process sees.
struct ExplicitDeviceMap {
  std::string from;
  std::string to;
  std::map<std::string, std::string> devices;
};
enum class DeviceMapMode { Auto, Explicit };
// Auto: the planner maps every pair of GPU workers; `maps` override listed pairs.
// Explicit: only the listed pairs (and their inverses) get device maps.
struct DeviceMaps {
  DeviceMapMode mode = DeviceMapMode::Auto;
  std::vector<ExplicitDeviceMap> maps;
};

enum class CleanPodPolicy { None, Running, All };
struct RunPolicy {
  int backoffLimit = kDefaultBackoffLimit;
  std::optional<int64_t> activeDeadlineSeconds;
  std::optional<int64_t> ttlSecondsAfterFinished;
  bool suspend = kDefaultSuspend;
  CleanPodPolicy cleanPodPolicy = CleanPodPolicy::Running;
};

struct Metrics {
  int port = kDefaultMetricsPort;  // 0: no metrics endpoint
  bool perPeerLabels = kDefaultPerPeerLabels;
};

struct RpcJobSpec {
  std::vector<WorkerGroup> workers;
  Placement placement;
  DeviceMaps deviceMaps;
  std::vector<std::string> transports;  // allowed, in priority order; empty: all viable
  std::vector<std::string> channels;    // allowed, in priority order; empty: all viable
  RunPolicy runPolicy;
  Metrics metrics;
};

struct Condition {
  std::string type;    // Planned, Created, Running, Succeeded, Failed, Restarting, Suspended
  std::string status;  // "True" | "False" | "Unknown"
  std::string reason;
  std::string message;
  std::string lastTransitionTime;  // RFC 3339
  int64_t observedGeneration = 0;
};

struct WorkerStatus {
  std::string name;
  int rank = -1;
  std::string group;
  std::string pod;
  std::string node;
  std::vector<int> gpus;
  std::string address;
  std::map<std::string, std::vector<std::string>> channels;              // by peer
  std::map<std::string, std::map<std::string, std::string>> deviceMaps;  // by peer
  std::string phase;  // the pod's or process's phase
  int restarts = 0;
};

struct RpcJobStatus {
  std::string
      phase;  // Pending, Planned, Created, Running, Succeeded, Failed, Restarting, Suspended
  std::vector<Condition> conditions;
  int64_t observedGeneration = 0;
  int workerCount = 0;   // printer column "Workers"
  int readyWorkers = 0;  // printer column "Ready"
  int restarts = 0;
  // Consecutive scheduler rejections since pods last got bound, and the nodes
  // that rejected them (left out of the next plan while another node fits).
  int schedulerRejections = 0;
  std::vector<std::string> rejectedNodes;
  std::vector<WorkerStatus> workers;
  std::string startTime;       // RFC 3339, empty when unset
  std::string completionTime;  // RFC 3339, empty when unset
};

struct RpcJob {
  ObjectMeta metadata;
  RpcJobSpec spec;
  std::optional<RpcJobStatus> status;
};

// Enum spellings, as in the manifest and the CRD.
const char* toString(PlacementPolicy policy);
const char* toString(WorkersPerPod workersPerPod);
const char* toString(DeviceMapMode mode);
const char* toString(CleanPodPolicy policy);
const char* toString(SelectorOperator op);

}  // namespace rpcjob::api
