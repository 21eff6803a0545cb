#pragma once
// The planner: from a validated RpcJob and a cluster view, where every worker runs
// (placement), and from that the worker table (rpcjob::Assignment: names, ranks,
// addresses, GPUs, device maps, channels) and the settings each pod needs.
// Pure: no I/O, no clock, no randomness; the same input gives the same plan.
//
// Placement is all-or-nothing: every worker is placed, or the plan is
// Unschedulable with a message naming what is missing and where.
//  - Nodes are candidates when ready, not cordoned, matching the template's
//    nodeSelector and required node affinity, with every NoSchedule/NoExecute
//    taint tolerated. Free = allocatable - used.
//  - Pack fills as few nodes as it can: workers in order (groups in spec order)
//    go to the first node already chosen that fits, else to the candidate with
//    the most free GPUs, then CPU, then memory, then the smallest name.
//    Spread puts each worker on the candidate with the fewest of the job's workers,
//    then the most free GPUs, then name. Both are greedy; when the natural order
//    does not fit, they try once more with the largest workers first.
//  - workersPerPod 1: a pod per worker, "<job>-<group>-<i>". Auto: one pod per node
//    used, "<job>-pod<k>", holding all the job's workers placed there.
// Assignment:
//  - ranks: nodes ordered by the first worker they hold (so the first group's first
//    worker is rank 0); the workers of one node (and pod) get adjacent ranks;
//  - names: "<group>" for a group of one, else "<group><i>" (api/names.h);
//  - GPUs: device indices as the worker's process sees them: counted within its
//    pod on Kubernetes, within the node for local runs, where they are handed out
//    in the node's neighbourOrder (gpu_topology.h: consecutive ranks get
//    NVLink-joined GPUs where the topology is known). With
//    spec.placement.workersPerGpu N, N consecutive GPU workers get the same GPU
//    (placement counts N shares per free GPU; a pod requests ceil(shares / N));
//    plans note the topology used and who shares which GPU;
//  - channels per pair, from where the two workers are (xth and cuda_xth are never
//    listed: two workers are always two processes):
//      same pod (or, locally, same machine): cma, basic; cuda_ipc, cuda_basic;
//        transports shm, uv;
//      different pods: mpt, basic; cuda_gdr where both nodes have RDMA, cuda_basic;
//        transports ibv where both nodes have RDMA, uv. Pods never share PID, IPC
//        or network namespaces, so shm and cma do not cross pods even on one node:
//        that is what workersPerPod Auto is for.
//    then filtered by spec.transports / spec.channels (in their order when given);
//  - device maps for every pair of GPU workers that has a cuda channel: the
//    first min(a, b) GPUs of one to those of the other, in order; explicit maps
//    from the spec override (Auto) or are the only ones (Explicit); the reverse
//    direction is always the inverse. The assignment carries neither channels nor
//    maps per pair (only the explicit maps): the planner and the runtime derive
//    them with rpcjob/assignment/pair_links.h;
//  - pod settings: a memory-backed /dev/shm for shm, shareProcessNamespace and
//    SYS_PTRACE for cma inside a pod, IPC_LOCK (and rdma/hca where the node
//    advertises it) for ibv and cuda_gdr. Nothing else.

#include <map>
#include <string>
#include <vector>

#include "rpcjob/api/errors.h"
#include "rpcjob/api/types.h"
#include "rpcjob/assignment/assignment.h"
#include "rpcjob/planner/cluster.h"
#include "rpcjob/planner/endpoints.h"

namespace rpcjob::planner {

struct WorkerPlacement {
  std::string name;
  std::string group;
  int groupIndex = 0;  // index within its group
  int rank = -1;
  std::string node;
  std::string pod;     // empty for local runs
  int indexInPod = 0;  // position among the workers of its pod (of its node, locally)
  std::vector<int> gpus;
};

struct PodPlan {
  std::string name;
  std::string node;
  std::vector<std::string> workers;  // in rank order
  Resources requests;                // sum of its workers' (gpus, cpu, memory, rdma/hca)
  bool shmVolume = false;            // memory-backed emptyDir at /dev/shm
  bool shareProcessNamespace = false;
  std::vector<std::string> capabilities;  // SYS_PTRACE, IPC_LOCK
};

enum class PlanOutcome { Planned, Unschedulable, Invalid };
const char* toString(PlanOutcome outcome);

struct Plan {
  PlanOutcome outcome = PlanOutcome::Invalid;
  std::string reason;   // a condition reason: Planned, Unschedulable, Invalid, NoTransport
  std::string message;  // for people: what is missing and where
  std::vector<api::FieldError> errors;   // Invalid: the validation errors
  std::vector<WorkerPlacement> workers;  // by rank; empty unless Planned
  std::vector<PodPlan> pods;             // by rank of their first worker; empty locally
  Assignment assignment;                 // empty unless Planned
  std::vector<std::string> notes;        // facts worth showing (NVLink, RDMA, no device map)

  bool planned() const { return outcome == PlanOutcome::Planned; }
};

enum class Target {
  Kubernetes,  // workers in pods
  Local,       // workers are processes on one machine (`rpcjob run`)
};

struct PlanOptions {
  Target target = Target::Kubernetes;
  // Empty: headlessServiceEndpoints(job) on Kubernetes, localEndpoints(29500,
  // spec.metrics.port) locally.
  EndpointFn endpoints;
  // Workers that already run somewhere (worker name -> node name): they stay
  // there whatever the policy would pick now, and count against that node's free
  // resources before the others are placed (a running job is adopted, never moved
  // for a "better" plan). A pinned node that is not in the cluster makes the plan
  // Unschedulable.
  std::map<std::string, std::string> pinned = {};
};

Plan planJob(const api::RpcJob& job, const ClusterView& cluster, const PlanOptions& options = {});

}  // namespace rpcjob::planner
