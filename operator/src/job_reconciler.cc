#include "rpcjob/operator/job_reconciler.h"

#include <algorithm>

#include "json_util.h"
#include "rpcjob/api/parse.h"
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

void JobReconciler::writeStatus(const std::string& key, const kube::Object& job,
                                const api::RpcJobStatus& status) {
  // PUT of the whole object to the status subresource: a field that became empty
  // (startTime after suspend) is cleared, and a stale resourceVersion fails with
  // 409 (retried with backoff) instead of overwriting a newer status.
  auto body = kube::detail::parseJson(job.json);
  auto st = kube::detail::parseJson(api::statusToJson(status));
  if (!body || !st) throw std::runtime_error("cannot build the status body of " + key);
  (*body)["status"] = *st;
  // +rpcjob:rbac:groups=rpcjob.dev,resources=rpcjobs/status,verbs=update
  kube::Object written = client_->updateStatus(r::kRpcJobs, job.metadata.namespace_,
                                               job.metadata.name, body->serialize());
  {
    std::lock_guard<std::mutex> lock(mu_);
    written_[key] = std::make_shared<const kube::Object>(std::move(written));
  }
  std::string why;
  for (const auto& c : status.conditions) {
    if (c.type == "Planned" && c.status == "False") why = " (" + c.reason + ": " + c.message + ")";
  }
  KLOG_INFO("reconcile", key << ": status " << status.phase << why);
}

std::vector<kube::ObjectPtr> JobReconciler::inFlightPods(const Caches& caches) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<kube::ObjectPtr> out;
  const auto now = std::chrono::steady_clock::now();
  for (auto e = created_.begin(); e != created_.end();) {
    kube::ObjectPtr cached = caches.pods.get(e->first);
    if (cached || now - e->second.at > std::chrono::seconds(30)) {
      e = created_.erase(e);
    } else {
      out.push_back(e->second.pod);
      ++e;
    }
  }
  return out;
}

ReconcileResult JobReconciler::reconcile(const std::string& key, const Caches& caches) {
  std::lock_guard<std::mutex> planning(planMu_);
  // Observe.
  kube::ObjectPtr job = freshest(key, caches.jobs.get(key));
  if (!job || !job->metadata.deletionTimestamp.empty()) {
    return {};  // children go by garbage collection (ownerReferences)
  }
  ObservedJob observed;
  observed.job = *job;
  // Expectations before the pods: one met after this list would be a pod
  // neither expected nor listed (it would look deleted).
  const std::vector<kube::ObjectPtr> inFlight = inFlightPods(caches);
  observed.pods = caches.pods.listOwnedBy(job->metadata.uid);
  observed.services = caches.services.listOwnedBy(job->metadata.uid);
  observed.configMaps = caches.configMaps.listOwnedBy(job->metadata.uid);
  const auto nodes = caches.nodes.list();
  std::vector<kube::ObjectPtr> allPods = caches.pods.list();
  for (const auto& p : inFlight) {
    KLOG_DEBUG("reconcile", key << ": pod " << p->metadata.key() << " created, not cached yet");
    allPods.push_back(p);
    const kube::OwnerReference* owner = p->metadata.controllerRef();
    if (owner && owner->uid == job->metadata.uid) observed.expectedPods.insert(p->metadata.name);
  }
  observed.cluster = clusterViewFrom(nodes, allPods, job->metadata.uid);
  for (const auto& n : nodes) {
    if (auto since = nodeReadySince(n->json)) observed.nodeReadySince[n->metadata.name] = *since;
  }
  observed.now = clock_();
  observed.nodeLostGrace = nodeLostGrace_;
  // A namespace not (yet) in the cache counts as unlabelled: privileged.
  if (kube::ObjectPtr n = caches.namespaces.get(job->metadata.namespace_)) {
    auto label = n->metadata.labels.find(kPodSecurityEnforceLabel);
    if (label != n->metadata.labels.end()) observed.podSecurity = podSecurityLevel(label->second);
  }

  // Compute.
  DesiredState d = computeDesiredState(observed);
  const api::RpcJobStatus before =
      api::parseRpcJobUnvalidated(job->json).job.status.value_or(api::RpcJobStatus{});

  // Act. Deletions follow the status that records why (see the header).
  const std::string& ns = job->metadata.namespace_;
  const bool statusFirst = d.statusChanged && !d.remove.empty();
  if (statusFirst) writeStatus(key, *job, d.status);
  for (const auto& c : d.remove) {
    // +rpcjob:rbac:groups="",resources=pods,verbs=delete
    kube::DeleteOptions o{"Background", "", std::nullopt};
    if (c.force) o.gracePeriodSeconds = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      created_.erase(ns + "/" + c.name);  // deleted by us: no longer expected
    }
    if (client_->removeIfExists(*c.resource, ns, c.name, o)) {
      KLOG_INFO("reconcile", key << ": deleted " << c.resource->kind << " " << c.name
                                 << (c.force ? " (forced)" : ""));
    }
  }
  std::vector<ChildError> errors;
  // The pods mount the job's Secret and are fenced by its NetworkPolicy: both first.
  if (std::any_of(d.create.begin(), d.create.end(),
                  [](const ChildObject& c) { return c.resource == &r::kPods; })) {
    ensureJobSecurity(*client_, {job->metadata.name, ns, job->metadata.uid},
                      metricsPortsOf(d.plan.assignment), networkPolicy_);
  }
  for (const auto& c : d.create) {
    try {
      // +rpcjob:rbac:groups="",resources=pods;services;configmaps,verbs=create
      // Children carry blockOwnerDeletion, which OwnerReferencesPermissionEnforcement
      // allows only to who may update the owner's finalizers.
      // +rpcjob:rbac:groups=rpcjob.dev,resources=rpcjobs/finalizers,verbs=update
      kube::Object made = client_->create(*c.resource, ns, c.json);
      KLOG_INFO("reconcile", key << ": created " << c.resource->kind << " " << c.name);
      if (c.resource == &r::kPods) {
        std::lock_guard<std::mutex> lock(mu_);
        const std::string podKey = made.metadata.key();  // before `made` is moved from
        created_[podKey] = {std::make_shared<const kube::Object>(std::move(made)),
                            std::chrono::steady_clock::now()};
      }
    } catch (const kube::ApiError& e) {
      if (!e.alreadyExists()) {
        if (e.retryable()) throw;  // the server, not the child: retried as is
        errors.push_back({"FailedCreate", c.resource->kind, c.name, e.what()});
        continue;
      }
      // Ours (its controller is this job) is fine; anyone else's is an error.
      // +rpcjob:rbac:groups="",resources=pods;services;configmaps,verbs=get
      auto existing = client_->tryGet(*c.resource, ns, c.name);
      const kube::OwnerReference* owner = existing ? existing->metadata.controllerRef() : nullptr;
      if (existing && (!owner || owner->uid != job->metadata.uid)) {
        errors.push_back({"NotOwned", c.resource->kind, c.name,
                          "exists and is not controlled by this RpcJob (" +
                              (owner ? owner->kind + " " + owner->name : std::string("no owner")) +
                              ")"});
      }
    }
  }
  for (const auto& c : d.update) {
    try {
      // +rpcjob:rbac:groups="",resources=configmaps,verbs=patch
      client_->mergePatch(*c.resource, ns, c.name, c.json);
      KLOG_INFO("reconcile", key << ": updated " << c.resource->kind << " " << c.name);
    } catch (const kube::ApiError& e) {
      if (e.retryable()) throw;
      errors.push_back({"FailedUpdate", c.resource->kind, c.name, e.what()});
    }
  }
  if (!statusFirst) {
    applyChildErrors(d, before, errors, formatTime(observed.now));
    if (d.statusChanged) writeStatus(key, *job, d.status);
  }
  if (events_) {
    for (const auto& e : d.events) {
      KLOG_INFO("reconcile", key << ": event " << e.type << " " << e.reason << ": " << e.message);
      events_->record(*job, e.type, e.reason, e.message);
    }
  }
  if (!errors.empty()) {
    for (const auto& e : errors) {
      KLOG_WARN("reconcile",
                key << ": " << e.reason << " " << e.kind << " " << e.name << ": " << e.message);
    }
    throw std::runtime_error(errors.front().kind + " " + errors.front().name + ": " +
                             errors.front().message);
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
