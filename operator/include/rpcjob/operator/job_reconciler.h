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
// Thread-safety: reconcile() may run on several threads (never for one key at once).

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

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

 private:
  kube::ObjectPtr freshest(const std::string& key, kube::ObjectPtr cached);

  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<kube::EventRecorder> events_;
  Clock clock_;
  std::mutex mu_;
  std::map<std::string, kube::ObjectPtr> written_;  // key -> job as last written
  NetworkPolicyOptions networkPolicy_;
};

}  // namespace rpcjob::op
