#include "rpcjob/operator/controller.h"

#include <thread>

#include "json_util.h"
#include "rpcjob/operator/log.h"
#include "rpcjob/operator/pod_security.h"

namespace rpcjob::op {

using kube::ObjectPtr;

std::string nodeSchedulingFingerprint(const std::string& nodeJson) {
  auto v = kube::detail::parseJson(nodeJson);
  if (!v || !v->is_object()) return nodeJson;
  web::json::value f = web::json::value::object();
  if (v->has_object_field("metadata") && v->at("metadata").has_field("labels")) {
    f["labels"] = v->at("metadata").at("labels");
  }
  if (v->has_field("spec")) f["spec"] = v->at("spec");
  if (v->has_object_field("status")) {
    const auto& st = v->at("status");
    if (st.has_field("allocatable")) f["allocatable"] = st.at("allocatable");
    if (st.has_field("capacity")) f["capacity"] = st.at("capacity");
    if (st.has_array_field("conditions")) {
      web::json::value conds = web::json::value::object();
      for (const auto& c : st.at("conditions").as_array()) {
        conds[kube::detail::getString(c, "type")] =
            web::json::value::string(kube::detail::getString(c, "status"));
      }
      f["conditions"] = conds;
    }
  }
  return f.serialize();
}

Controller::Controller(std::shared_ptr<kube::Client> client, Reconciler& reconciler,
                       ControllerOptions options)
    : client_(std::move(client)),
      reconciler_(reconciler),
      options_(std::move(options)),
      queue_(options_.queue) {
  kube::InformerOptions io = options_.informer;
  io.ns = options_.ns;
  kube::InformerOptions nodes = options_.informer;
  nodes.ns.clear();
  namespace r = kube::resources;
  // Each informer lists then watches its resource (informer.cc).
  // +rpcjob:rbac:groups=rpcjob.dev,resources=rpcjobs,verbs=list;watch
  // +rpcjob:rbac:groups="",resources=pods;services;configmaps,verbs=list;watch
  // +rpcjob:rbac:groups="",resources=nodes,verbs=list;watch
  // The jobs' namespaces, for their Pod Security level (pod_security.h).
  // +rpcjob:rbac:groups="",resources=namespaces,verbs=list;watch
  informers_.push_back(std::make_unique<kube::Informer>(client_, r::kRpcJobs, io));
  informers_.push_back(std::make_unique<kube::Informer>(client_, r::kPods, io));
  informers_.push_back(std::make_unique<kube::Informer>(client_, r::kServices, io));
  informers_.push_back(std::make_unique<kube::Informer>(client_, r::kConfigMaps, io));
  informers_.push_back(std::make_unique<kube::Informer>(client_, r::kNodes, nodes));
  informers_.push_back(std::make_unique<kube::Informer>(client_, r::kNamespaces, nodes));

  auto enqueueSelf = [this](const ObjectPtr& o) { queue_.add(o->metadata.key()); };
  informers_[0]->addHandler(
      {enqueueSelf, [enqueueSelf](const ObjectPtr&, const ObjectPtr& n) { enqueueSelf(n); },
       enqueueSelf});
  auto owner = [this](const ObjectPtr& o) { enqueueOwner(o); };
  // A pod that stops holding resources (deleted, or finished) may let a waiting
  // job fit: wake the jobs that wait.
  auto terminal = [](const ObjectPtr& p) {
    auto phase = kube::jsonString(p->json, "/status/phase").value_or("");
    return phase == "Succeeded" || phase == "Failed";
  };
  informers_[1]->addHandler({nullptr,
                             [this, terminal](const ObjectPtr& o, const ObjectPtr& n) {
                               if (!terminal(o) && terminal(n)) enqueueWaiting();
                             },
                             [this](const ObjectPtr&) { enqueueWaiting(); }});
  for (int i = 1; i <= 3; ++i) {
    informers_[i]->addHandler({owner,
                               [owner](const ObjectPtr& o, const ObjectPtr& n) {
                                 owner(o);
                                 owner(n);
                               },
                               owner});
  }
  auto allJobs = [this](const ObjectPtr&) {
    for (const auto& key : informers_[0]->cache().keys()) queue_.add(key);
  };
  // Kubelets rewrite their Node every few seconds (heartbeats); only a change
  // that can move a placement wakes the jobs.
  informers_[4]->addHandler({allJobs,
                             [allJobs](const ObjectPtr& o, const ObjectPtr& n) {
                               if (nodeSchedulingFingerprint(o->json) !=
                                   nodeSchedulingFingerprint(n->json)) {
                                 allJobs(n);
                               }
                             },
                             allJobs});
  // A namespace's Pod Security level changes which links its jobs may use.
  auto jobsIn = [this](const ObjectPtr& n) {
    for (const auto& job : informers_[0]->cache().list(n->metadata.name)) {
      queue_.add(job->metadata.key());
    }
  };
  auto level = [](const ObjectPtr& n) {
    return n->metadata.labels.count(kPodSecurityEnforceLabel)
               ? n->metadata.labels.at(kPodSecurityEnforceLabel)
               : std::string();
  };
  informers_[5]->addHandler({jobsIn,
                             [jobsIn, level](const ObjectPtr& o, const ObjectPtr& n) {
                               if (level(o) != level(n)) jobsIn(n);
                             },
                             nullptr});
}

Controller::~Controller() {
  queue_.shutDown();
  for (auto& i : informers_) i->stop();
}

void Controller::enqueueOwner(const ObjectPtr& obj) {
  const kube::OwnerReference* ref = obj->metadata.controllerRef();
  if (ref == nullptr || ref->kind != kube::resources::kRpcJobs.kind) return;
  queue_.add(obj->metadata.namespace_ + "/" + ref->name);
}

void Controller::enqueueWaiting() {
  for (const auto& job : informers_[0]->cache().list()) {
    auto phase = kube::jsonString(job->json, "/status/phase").value_or("");
    if (phase.empty() || phase == "Pending") {
      KLOG_DEBUG("controller", "capacity freed: waking " << job->metadata.key());
      queue_.add(job->metadata.key());
    }
  }
}

bool Controller::healthy() const {
  for (const auto& i : informers_) {
    if (!i->healthy(options_.unhealthyAfter)) return false;
  }
  return true;
}

bool Controller::synced() const {
  for (const auto& i : informers_) {
    if (!i->hasSynced()) return false;
  }
  return true;
}

Caches Controller::caches() const {
  return Caches{informers_[0]->cache(), informers_[1]->cache(), informers_[2]->cache(),
                informers_[3]->cache(), informers_[4]->cache(), informers_[5]->cache()};
}

void Controller::work() {
  Caches c = caches();
  while (auto key = queue_.get()) {
    auto started = std::chrono::steady_clock::now();
    auto report = [&](bool ok) {
      if (options_.onReconciled) {
        options_.onReconciled(*key, std::chrono::steady_clock::now() - started, ok);
      }
    };
    try {
      ReconcileResult result = reconciler_.reconcile(*key, c);
      report(true);
      queue_.forget(*key);
      if (result.requeueAfter) queue_.addAfter(*key, *result.requeueAfter);
    } catch (const std::exception& e) {
      report(false);
      auto delay = queue_.nextDelay(*key);
      KLOG_WARN("controller", "reconcile " << *key << " failed (" << e.what() << "), retry in "
                                           << delay.count() << " ms");
      queue_.addRateLimited(*key);
    }
    queue_.done(*key);
  }
}

bool Controller::run(kube::Cancellation& stop) {
  for (auto& i : informers_) i->start();
  auto deadline = std::chrono::steady_clock::now() + options_.syncTimeout;
  for (auto& i : informers_) {
    while (!i->waitForSync(std::chrono::milliseconds(200))) {
      if (stop.cancelled() || std::chrono::steady_clock::now() > deadline) {
        if (!stop.cancelled()) {
          KLOG_ERROR("controller", i->resource().plural << " did not sync in time");
        }
        queue_.shutDown();
        for (auto& j : informers_) j->stop();
        return stop.cancelled();
      }
    }
  }
  KLOG_INFO("controller", "caches synced; " << options_.workers << " workers");
  std::vector<std::thread> workers;
  for (int i = 0; i < std::max(1, options_.workers); ++i) workers.emplace_back([this] { work(); });
  kube::CancelRegistration reg(stop, [this] { queue_.shutDown(); });
  std::thread resync;
  if (options_.resyncPeriod.count() > 0) {
    resync = std::thread([this, &stop] {
      while (!stop.sleepFor(options_.resyncPeriod)) {
        for (const auto& key : informers_[0]->cache().keys()) queue_.add(key);
      }
    });
  }
  for (auto& t : workers) t.join();
  if (resync.joinable()) resync.join();
  for (auto& i : informers_) i->stop();
  return true;
}

}  // namespace rpcjob::op
