#pragma once
// The reconciler's compute step: from what was observed (the RpcJob, the children
// it controls, the cluster) to what should be (its children, its status) and the
// actions that get there. Pure: no I/O, the clock is an input; the same
// observation gives the same answer, and an observation that already matches
// gives no action at all (idempotence: reconcile twice, act once).
//
// Status model (status.phase; conditions, each with reason and message):
//   Planned        True Planned (the plan's summary) | False Unschedulable (what is
//                  missing and where, or the scheduler's rejection), NoTransport, Invalid
//   Running        True AllWorkersRunning | False WorkersPending ("k of n pods running")
//   Restarting     True WorkerFailed, NodeLost, PodDeleted ("restart k of limit"),
//                  PlacementInvalid | False Relaunched
//   Succeeded      True AllWorkersSucceeded
//   Failed         True BackoffLimitExceeded, DeadlineExceeded, Invalid
//   Suspended      True Suspended | False Resumed
//   SpecApplied    False DeferredWhileRunning | True Applied (only after a deferral)
//   PodSecurity    True LinksLeftOut (the namespace's Pod Security level forbids what
//                  a transport or channel needs: which, what it needs, the level;
//                  a Warning) | False NothingLeftOut (only after a True). A job whose
//                  spec.transports or spec.channels names only forbidden links gets
//                  Planned False NoTransport instead, and no pods.
//   ReplicaFailure True FailedCreate, FailedUpdate, NotOwned | False Created
//                  (applyChildErrors: set from what acting met)
// phase: Pending (not placed, or waiting after a rejection), Planned (pods created,
// not all running), Running, Restarting, Suspended, Succeeded, Failed. A condition's
// lastTransitionTime changes only when its status does. Events: one per condition
// transition (Warning for Failed, Restarting, Planned=False), so a repeated
// reconcile never repeats an Event.
//
// Run policy: the lifecycle rules, in the order they are applied, are in
// operator/README.md ("Lifecycle rules"); in short: invalid, finished, suspended,
// deadline, then failures before any planning (node lost, worker failed, pod
// deleted: restarts counted against backoffLimit; scheduler rejection: backoff, not
// counted), then a spec edit under live pods is deferred, then the plan (live pods
// pinned where they run), then creates.
// Restart generation: status.restarts, also the pods' rpcjob.dev/restart-generation
// label. Pods of another generation are deleted; a pod being deleted blocks the
// creation of its name.

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rpcjob/api/types.h"
#include "rpcjob/operator/object.h"
#include "rpcjob/operator/pod_security.h"
#include "rpcjob/operator/resource.h"
#include "rpcjob/planner/plan.h"

namespace rpcjob::op {

struct ObservedJob {
  kube::Object job;  // the RpcJob as the API server sent it
  // Children whose controller is this job (from the informer caches).
  std::vector<kube::ObjectPtr> pods;
  std::vector<kube::ObjectPtr> services;
  std::vector<kube::ObjectPtr> configMaps;
  planner::ClusterView cluster;  // nodes minus other pods' usage (cluster_view.h)
  // Since when each node's Ready condition has its current status (cluster_view.h's
  // nodeReadySince); a NotReady node missing here counts as NotReady for ever.
  std::map<std::string, std::chrono::system_clock::time_point> nodeReadySince;
  // Pods this operator created that the caches have not shown yet: present, Pending.
  std::set<std::string> expectedPods;
  std::chrono::system_clock::time_point now;
  // How long a node may be NotReady under a running pod before the pod is lost.
  std::chrono::seconds nodeLostGrace{60};
  // The job's namespace's Pod Security level (its pod-security.kubernetes.io/enforce
  // label): bounds the pods' capabilities and the links the plan may use
  // (pod_security.h).
  PodSecurityLevel podSecurity = PodSecurityLevel::Privileged;
};

struct ChildObject {
  const kube::Resource* resource = nullptr;
  std::string name;
  std::string json;    // for create/update
  bool force = false;  // remove with gracePeriodSeconds 0 (its node cannot confirm)
};

struct JobEvent {
  std::string type;  // Normal | Warning
  std::string reason;
  std::string message;
};

struct DesiredState {
  planner::Plan plan;               // meaningful when plan.planned()
  api::RpcJobStatus status;         // the status the job should have
  bool statusChanged = false;       // differs from the observed status
  std::vector<ChildObject> create;  // missing children (AlreadyExists is fine)
  std::vector<ChildObject> update;  // children whose content differs (ConfigMap data)
  std::vector<ChildObject> remove;  // children to delete (json empty)
  std::vector<JobEvent> events;
  bool deleteJob = false;  // ttlSecondsAfterFinished passed
  std::optional<std::chrono::milliseconds> requeueAfter;
};

DesiredState computeDesiredState(const ObservedJob& observed);

// What acting on a DesiredState met: a child the API refused (validation,
// admission, quota, size: the API's message) or one that exists but belongs to
// someone else. Sets ReplicaFailure (True FailedCreate/FailedUpdate/NotOwned, or
// False Created once a pass meets none), clears the worker phase of pods that
// were not created, adds a Warning Event when the condition changes, and
// recomputes statusChanged against `observed`.
struct ChildError {
  std::string reason;  // FailedCreate | FailedUpdate | NotOwned
  std::string kind;
  std::string name;
  std::string message;
};
void applyChildErrors(DesiredState& d, const api::RpcJobStatus& observed,
                      const std::vector<ChildError>& errors, const std::string& now);

// Scheduler-rejection backoff: base 5 s doubling per consecutive rejection up to
// 5 min, times a jitter in [0.5, 1) fixed by the job's uid and the count (pure, so
// every replica and every reconcile agrees).
std::chrono::milliseconds rejectionBackoff(const std::string& uid, int rejections);

// The part of a spec that shapes the pods (all but runPolicy), hashed (FNV-1a
// 64, hex) from the spec JSON: pods carry it (annotation rpcjob.dev/spec-hash) so
// an edit of a running job is seen.
std::string podSpecHash(const std::string& jobJson);

// RFC 3339, UTC, seconds ("2026-11-22T10:00:00Z"); parse gives nullopt on others.
std::string formatTime(std::chrono::system_clock::time_point t);
std::optional<std::chrono::system_clock::time_point> parseTime(const std::string& text);

}  // namespace rpcjob::op
