#include "rpcjob/operator/job_reconciler.h"

#include <algorithm>

#include "json_util.h"
#include "rpcjob/api/serialize.h"
#include "rpcjob/operator/cluster_view.h"
#include "rpcjob/operator/desired_state.h"
#include "rpcjob/operator/log.h"

namespace rpcjob::op {
namespace {

namespace r = kube::resources;

int64_t versionNumber(const std::string& rv) {
  // Opaque to clients in principle; etcd revisions in practice. Only used to tell
  // which of two versions of one object is newer; unparsable: treat as oldest.
  try {
    return std::stoll(rv);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

JobReconciler::JobReconciler(std::shared_ptr<kube::Client> client,
                             std::shared_ptr<kube::EventRecorder> events, Clock clock)
    : client_(std::move(client)), events_(std::move(events)), clock_(std::move(clock)) {}

kube::ObjectPtr JobReconciler::freshest(const std::string& key, kube::ObjectPtr cached) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = written_.find(key);
  if (!cached) {
    if (it != written_.end()) written_.erase(it);
    return cached;
  }
  if (it == written_.end()) return cached;
  if (it->second->metadata.uid == cached->metadata.uid &&
      versionNumber(it->second->metadata.resourceVersion) >
          versionNumber(cached->metadata.resourceVersion)) {
    return it->second;
  }
  written_.erase(it);  // the cache caught up (or the job was recreated)
  return cached;
}

ReconcileResult JobReconciler::reconcile(const std::string& key, const Caches& caches) {
  // Observe.
  kube::ObjectPtr job = freshest(key, caches.jobs.get(key));
  if (!job || !job->metadata.deletionTimestamp.empty()) {
    return {};  // children go by garbage collection (ownerReferences)
  }
  ObservedJob observed;
  observed.job = *job;
  observed.pods = caches.pods.listOwnedBy(job->metadata.uid);
  observed.services = caches.services.listOwnedBy(job->metadata.uid);
  observed.configMaps = caches.configMaps.listOwnedBy(job->metadata.uid);
  observed.cluster = clusterViewFrom(caches.nodes.list(), caches.pods.list(), job->metadata.uid);
  observed.now = clock_();

  // Compute.
  DesiredState d = computeDesiredState(observed);

  // Act.
  const std::string& ns = job->metadata.namespace_;
  // The pods mount the job's Secret and are fenced by its NetworkPolicy: both first.
  if (std::any_of(d.create.begin(), d.create.end(),
                  [](const ChildObject& c) { return c.resource == &r::kPods; })) {
    ensureJobSecurity(*client_, {job->metadata.name, ns, job->metadata.uid},
                      metricsPortsOf(d.plan.assignment), networkPolicy_);
  }
  for (const auto& c : d.create) {
    try {
      // +rpcjob:rbac:groups="",resources=pods;services;configmaps,verbs=create
      client_->create(*c.resource, ns, c.json);
      KLOG_INFO("reconcile", key << ": created " << c.resource->kind << " " << c.name);
    } catch (const kube::ApiError& e) {
      if (!e.alreadyExists()) throw;
    }
  }
  for (const auto& c : d.update) {
    // +rpcjob:rbac:groups="",resources=configmaps,verbs=patch
    client_->mergePatch(*c.resource, ns, c.name, c.json);
    KLOG_INFO("reconcile", key << ": updated " << c.resource->kind << " " << c.name);
  }
  for (const auto& c : d.remove) {
    // +rpcjob:rbac:groups="",resources=pods,verbs=delete
    if (client_->removeIfExists(*c.resource, ns, c.name, {"Background", "", std::nullopt})) {
      KLOG_INFO("reconcile", key << ": deleted " << c.resource->kind << " " << c.name);
    }
  }
  if (d.statusChanged) {
    // PUT of the whole object to the status subresource: a field that became empty
    // (startTime after suspend) is cleared, and a stale resourceVersion fails with
    // 409 (retried with backoff) instead of overwriting a newer status.
    auto body = kube::detail::parseJson(job->json);
    auto status = kube::detail::parseJson(api::statusToJson(d.status));
    if (!body || !status) throw std::runtime_error("cannot build the status body of " + key);
    (*body)["status"] = *status;
    // +rpcjob:rbac:groups=rpcjob.dev,resources=rpcjobs/status,verbs=update
    kube::Object written =
        client_->updateStatus(r::kRpcJobs, ns, job->metadata.name, body->serialize());
    {
      std::lock_guard<std::mutex> lock(mu_);
      written_[key] = std::make_shared<const kube::Object>(std::move(written));
    }
    KLOG_INFO("reconcile", key << ": status " << d.status.phase);
  }
  if (events_) {
    for (const auto& e : d.events) events_->record(*job, e.type, e.reason, e.message);
  }
  if (d.deleteJob) {
    // +rpcjob:rbac:groups=rpcjob.dev,resources=rpcjobs,verbs=delete
    client_->removeIfExists(r::kRpcJobs, ns, job->metadata.name,
                            {"Background", job->metadata.uid, std::nullopt});
    KLOG_INFO("reconcile", key << ": deleted (ttlSecondsAfterFinished)");
  }
  return {d.requeueAfter};
}

}  // namespace rpcjob::op
