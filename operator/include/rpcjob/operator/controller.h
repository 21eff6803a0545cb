#pragma once
// The seam between the client machinery and the reconciler: informers for the
// resources the operator reads, a work queue of RpcJob keys, and worker threads
// that call a Reconciler for one key at a time.
//
// Which events enqueue which job:
//   RpcJob                      its own key
//   Pod / Service / ConfigMap   the key of its controller owner, if that is an RpcJob
//   Node                        every RpcJob (capacity changed: pending jobs may now fit)
//
// A reconcile that throws is retried after the queue's per-key backoff; one that
// returns requeueAfter is run again after that delay; success forgets the key's
// failures. Thread-safety: run() once; caches() from any thread after construction.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rpcjob/operator/cache.h"
#include "rpcjob/operator/cancellation.h"
#include "rpcjob/operator/client.h"
#include "rpcjob/operator/informer.h"
#include "rpcjob/operator/work_queue.h"

namespace rpcjob::op {

// Read-only views of the informer caches, valid for the Controller's lifetime.
struct Caches {
  const kube::Cache& jobs;
  const kube::Cache& pods;
  const kube::Cache& services;
  const kube::Cache& configMaps;
  const kube::Cache& nodes;
  const kube::Cache& namespaces;  // their pod-security.kubernetes.io/enforce labels
};

struct ReconcileResult {
  std::optional<std::chrono::milliseconds> requeueAfter;  // run again after this
};

// Observe -> compute -> act for one RpcJob. `jobKey` is "namespace/name"; the
// job may be gone from caches.jobs (deleted): then clean up or do nothing.
// Throw to have the key retried with backoff. Called from several worker
// threads, never for the same key at once.
class Reconciler {
 public:
  virtual ~Reconciler() = default;
  virtual ReconcileResult reconcile(const std::string& jobKey, const Caches& caches) = 0;
};

struct ControllerOptions {
  std::string ns;  // watch this namespace; empty: all
  int workers = 2;
  kube::InformerOptions informer;  // ns is taken from above
  kube::WorkQueue::Options queue;
  std::chrono::milliseconds syncTimeout{std::chrono::seconds(60)};
  // Every job is reconciled again this often, whatever happened (a backstop for
  // a missed event: a waiting job wakes even if no watch told it to). 0: never.
  std::chrono::milliseconds resyncPeriod{std::chrono::minutes(5)};
  // /healthz fails when an informer has failed to list or watch for this long.
  std::chrono::milliseconds unhealthyAfter{std::chrono::minutes(2)};
  // Called after every reconcile (for metrics), on the worker's thread.
  std::function<void(const std::string& key, std::chrono::duration<double> took, bool ok)>
      onReconciled;
};

// What of a Node can change a placement: labels, spec (taints, unschedulable),
// capacity, allocatable and each condition's status (not heartbeat times).
// Nodes whose fingerprint did not change do not wake the jobs.
std::string nodeSchedulingFingerprint(const std::string& nodeJson);

class Controller {
 public:
  Controller(std::shared_ptr<kube::Client> client, Reconciler& reconciler,
             ControllerOptions options = {});
  ~Controller();

  // Starts the informers, waits until all have synced, runs the workers until
  // `stop` fires, then stops everything. Returns false if the caches did not
  // sync within syncTimeout.
  bool run(kube::Cancellation& stop);

  Caches caches() const;
  kube::WorkQueue& queue() { return queue_; }
  size_t queueDepth() const { return queue_.depth(); }
  // True once every informer has listed (readiness).
  bool synced() const;
  // False when an informer has lost the server for longer than unhealthyAfter
  // (liveness: its caches go stale).
  bool healthy() const;
  const std::vector<std::unique_ptr<kube::Informer>>& informers() const { return informers_; }

 private:
  void work();
  void enqueueOwner(const kube::ObjectPtr& obj);
  void enqueueWaiting();  // jobs that wait for capacity (status.phase Pending)

  std::shared_ptr<kube::Client> client_;
  Reconciler& reconciler_;
  ControllerOptions options_;
  kube::WorkQueue queue_;
  std::vector<std::unique_ptr<kube::Informer>>
      informers_;  // jobs, pods, services, configmaps, nodes, namespaces
};

}  // namespace rpcjob::op
