#pragma once
// The RpcJob reconciler: observe (the informer caches, never a list from the
// server), compute (computeDesiredState, desired_state.h: pure), act (create
// missing children, tolerating AlreadyExists; delete extras; write status through
// the status subresource only when it changed; record an Event per condition
// transition; delete a job whose ttlSecondsAfterFinished passed).
//
// Read-your-writes: after a status write the informer may still hold the older
// job for a moment; the reconciler keeps the object the server returned and uses
// it while the cache is older, so a stale cache never makes it count one failed
// pod twice or repeat an Event.
//
// Order of acts: a pass that deletes pods (a restart, a rejection, a lost node)
// writes the status first, so a 409 on that write loses nothing (nothing was
// done; the pass is retried from fresh state) and a crash after it cannot forget
// the restart it counted. A pass that creates writes the status after the
// creates, so the status never lists a pod that was not created.
// Expectations: pods created are remembered until the cache shows them (or 30 s
// pass), so a cache that lags never makes a pod look deleted, and every job's
// plan counts them as holding their resources. Reconciles are serialized
// (planMu_), so two jobs never plan onto the same free GPUs.
// Child errors (the API refusing a child, or a child of the job's name that
// another owner holds) become the ReplicaFailure condition and a Warning Event
// (applyChildErrors), then the pass fails so the queue retries with backoff.
//
// Thread-safety: reconcile() may run on several threads (never for one key at once).

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "rpcjob/api/types.h"
#include "rpcjob/operator/client.h"
#include "rpcjob/operator/controller.h"
#include "rpcjob/operator/events.h"
#include "rpcjob/operator/job_security.h"

namespace rpcjob::op {

class JobReconciler final : public Reconciler {
 public:
  using Clock = std::function<std::chrono::system_clock::time_point()>;
  JobReconciler(
      std::shared_ptr<kube::Client> client, std::shared_ptr<kube::EventRecorder> events,
      Clock clock = [] { return std::chrono::system_clock::now(); });

  ReconcileResult reconcile(const std::string& jobKey, const Caches& caches) override;
  // The NetworkPolicy created with each job (job_security.h); before the first reconcile.
  void setNetworkPolicy(NetworkPolicyOptions options) { networkPolicy_ = std::move(options); }

  // How long a node may be NotReady under a running pod before the pod is lost.
  void setNodeLostGrace(std::chrono::seconds grace) { nodeLostGrace_ = grace; }

 private:
  void writeStatus(const std::string& key, const kube::Object& job,
                   const api::RpcJobStatus& status);
  // Forgets the expectations the pod cache has met (or that are 30 s old);
  // returns the pods created but not yet in the cache, of every job.
  std::vector<kube::ObjectPtr> inFlightPods(const Caches& caches);
  kube::ObjectPtr freshest(const std::string& key, kube::ObjectPtr cached);

  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<kube::EventRecorder> events_;
  Clock clock_;
  std::mutex mu_;
  std::map<std::string, kube::ObjectPtr> written_;  // key -> job as last written
  // Expectations (see above): pod key (ns/name) -> the pod as created, and when.
  struct Created {
    kube::ObjectPtr pod;
    std::chrono::steady_clock::time_point at;
  };
  std::map<std::string, Created> created_;
  // Observe-compute-act of one job at a time: two jobs planned at once would
  // both count the same free GPUs (neither sees the other's new pods).
  std::mutex planMu_;
  std::chrono::seconds nodeLostGrace_{60};
  NetworkPolicyOptions networkPolicy_;
};

}  // namespace rpcjob::op
