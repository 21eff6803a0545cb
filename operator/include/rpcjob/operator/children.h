#pragma once
// The objects an RpcJob owns, built from its plan. Pure: JSON text in, JSON text
// out, no I/O. Every child carries the job's labels and a controller
// ownerReference (blockOwnerDeletion), so deleting the job deletes them (garbage
// collection in kube-controller-manager).
//
//  - Service "<job>": headless (clusterIP None) with publishNotReadyAddresses, so
//    "<pod>.<job>.<ns>.svc" resolves as soon as a pod has an IP, before it is ready
//    (workers dial their peers while starting: no DNS race).
//  - ConfigMap "<job>-assignment": key assignment.yaml = rpcjob::toYaml(assignment).
//  - One Pod per PodPlan, named as planned, from the worker group's template:
//      * pinned to its planned node by required node affinity
//        (kubernetes.io/hostname In [node], added to every term of the template's
//        own required affinity), not spec.nodeName, so that the scheduler still
//        checks it and a rejection is visible (PodScheduled=False);
//      * hostname = pod name, subdomain = job name (the Service);
//      * restartPolicy Never: the operator restarts the whole job (run policy);
//      * labels app.kubernetes.io/{name: rpcjob-worker, instance: <job>,
//        managed-by: rpcjob-operator}, rpcjob.dev/{job-name, group,
//        restart-generation}; annotation rpcjob.dev/node = planned node;
//      * the assignment ConfigMap mounted read-only at /etc/rpcjob in every
//        container; the plan's pod settings (memory-backed /dev/shm emptyDir,
//        shareProcessNamespace, rdma/hca on the first worker container);
//      * the securityContext of pod_security.h on the pod and its worker
//        container (restricted defaults where the template is silent, then the
//        plan's capabilities that the namespace's Pod Security level allows).
//    Worker containers: the template's first container runs the pod's workers
//    (the others are sidecars, left as they are apart from the mount), and it
//    holds all of the pod's devices: limits nvidia.com/gpu = the pod's GPUs
//    (ceil(shares / workersPerGpu) when workers share GPUs), rdma/hca, the
//    capabilities. The device plugin then shows that one container the pod's
//    GPUs as cuda:0..k-1, the indices the plan gives (why: operator/README.md).
//     - a pod of one worker (workersPerPod 1, or Auto with one worker on the
//       node): the container is the worker, with env RPCJOB_WORKER_NAME,
//       RPCJOB_RANK, RPCJOB_WORLD_SIZE, RPCJOB_JOB_NAME, RPCJOB_NAMESPACE,
//       RPCJOB_ASSIGNMENT=/etc/rpcjob/assignment.yaml, RPCJOB_METRICS_PORT
//       (these replace same-named template variables) and ports "rpc", "metrics";
//     - a pod of several workers (workersPerPod Auto): the container (from the
//       template of the pod's first worker: its image, volumes, securityContext)
//       runs `rpcjob-launch`, which starts each worker as a process from the
//       launch spec in env RPCJOB_POD_WORKERS (rpcjob/assignment/pod_launch.h):
//       per worker its group's command and args (no command: rpcjob-worker with
//       the args, else `serve`, as `rpcjob run` does), its group's literal env
//       entries and the variables above. valueFrom entries need the kubelet:
//       those of the first worker's group stay on the container, so every
//       worker of the pod inherits them; other groups' are dropped. Ports "rpc"/"metrics" for the
//       first worker, "rpc-k"/"metrics-k" for the k-th; requests cpu and memory = the plan's sums,
//       limits the templates' sums when every worker's template has one (else none). The workers of
//       one pod run from one image, the first worker's group's.

#include <string>

#include "rpcjob/api/types.h"
#include "rpcjob/operator/pod_security.h"
#include "rpcjob/planner/plan.h"

namespace rpcjob::op {

inline constexpr const char* kLabelName = "app.kubernetes.io/name";
inline constexpr const char* kLabelInstance = "app.kubernetes.io/instance";
inline constexpr const char* kLabelManagedBy = "app.kubernetes.io/managed-by";
inline constexpr const char* kLabelJobName = "rpcjob.dev/job-name";
inline constexpr const char* kLabelGroup = "rpcjob.dev/group";
inline constexpr const char* kLabelRestartGeneration = "rpcjob.dev/restart-generation";
inline constexpr const char* kAnnotationNode = "rpcjob.dev/node";
inline constexpr const char* kWorkerAppName = "rpcjob-worker";
inline constexpr const char* kManagedBy = "rpcjob-operator";
inline constexpr const char* kHostnameLabel = "kubernetes.io/hostname";
inline constexpr const char* kAssignmentKey = "assignment.yaml";
inline constexpr const char* kAssignmentDir = "/etc/rpcjob";
inline constexpr const char* kAssignmentPath = "/etc/rpcjob/assignment.yaml";
inline constexpr const char* kAssignmentVolume = "rpcjob-assignment";
inline constexpr const char* kShmVolume = "dshm";
// The launcher of a pod's workers (runner/, in the worker images) and the
// program a container without a command runs.
inline constexpr const char* kLaunchProgram = "rpcjob-launch";
inline constexpr const char* kWorkerProgram = "rpcjob-worker";

std::string assignmentConfigMapName(const std::string& job);  // "<job>-assignment"

// The job's identity as its children need it (owner reference, names).
struct JobRef {
  std::string name;
  std::string ns;
  std::string uid;
};

std::string serviceJson(const JobRef& job, int rpcPort);
std::string configMapJson(const JobRef& job, const Assignment& assignment);
// `hostname`: the value of the planned node's kubernetes.io/hostname label
// (usually the node name). `generation`: status.restarts when created. `level`:
// the namespace's Pod Security level, which bounds the capabilities added
// (pod_security.h).
std::string podJson(const JobRef& job, const api::RpcJobSpec& spec, const planner::Plan& plan,
                    const planner::PodPlan& pod, const std::string& hostname, int generation,
                    PodSecurityLevel level = PodSecurityLevel::Privileged);

}  // namespace rpcjob::op
