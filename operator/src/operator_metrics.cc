#include "rpcjob/operator/operator_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <mutex>

#include "rpcjob/operator/controller.h"

namespace rpcjob::op {

struct OperatorMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Counter>& reconciles =
      prometheus::BuildCounter()
          .Name("rpcjob_operator_reconciles_total")
          .Help("Reconciles of RpcJobs, by result")
          .Register(*registry);
  prometheus::Counter& ok = reconciles.Add({{"result", "success"}});
  prometheus::Counter& failed = reconciles.Add({{"result", "error"}});
  prometheus::Histogram& duration = prometheus::BuildHistogram()
                                        .Name("rpcjob_operator_reconcile_duration_seconds")
                                        .Help("Time one reconcile of one RpcJob took")
                                        .Register(*registry)
                                        .Add({}, prometheus::Histogram::BucketBoundaries{
                                                     0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10});
  prometheus::Gauge& depth = prometheus::BuildGauge()
                                 .Name("rpcjob_operator_workqueue_depth")
                                 .Help("RpcJob keys waiting to be reconciled")
                                 .Register(*registry)
                                 .Add({});
  prometheus::Family<prometheus::Gauge>& jobs = prometheus::BuildGauge()
                                                    .Name("rpcjob_operator_jobs")
                                                    .Help("RpcJobs by status.phase")
                                                    .Register(*registry);
  prometheus::Gauge& leader = prometheus::BuildGauge()
                                  .Name("rpcjob_operator_leader")
                                  .Help("1 while this replica holds the leader Lease")
                                  .Register(*registry)
                                  .Add({});
  prometheus::Family<prometheus::Gauge>& relists =
      prometheus::BuildGauge()
          .Name("rpcjob_operator_informer_relists_total")
          .Help("Full lists an informer made (the first, and one per 410 Gone)")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& errors =
      prometheus::BuildGauge()
          .Name("rpcjob_operator_informer_errors_total")
          .Help("Failed lists and watches of an informer")
          .Register(*registry);

  std::mutex mu;  // scrape-time state
  std::atomic<const Controller*> controller{nullptr};
  std::map<std::string, prometheus::Gauge*> jobGauges;
};

OperatorMetrics::OperatorMetrics() : impl_(std::make_unique<Impl>()) {}
OperatorMetrics::~OperatorMetrics() = default;

void OperatorMetrics::observeReconcile(std::chrono::duration<double> took, bool ok) {
  (ok ? impl_->ok : impl_->failed).Increment();
  impl_->duration.Observe(took.count());
}

void OperatorMetrics::setLeader(bool leader) {
  impl_->leader.Set(leader ? 1 : 0);
}

void OperatorMetrics::watchController(const Controller* controller) {
  impl_->controller = controller;
}

std::vector<prometheus::MetricFamily> OperatorMetrics::collect() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (const Controller* c = impl_->controller.load()) {
    impl_->depth.Set(static_cast<double>(c->queueDepth()));
    std::map<std::string, int> byState;
    for (const auto& job : c->caches().jobs.list()) {
      std::string phase = kube::jsonString(job->json, "/status/phase").value_or("Pending");
      ++byState[phase];
    }
    for (auto& [state, gauge] : impl_->jobGauges) gauge->Set(0);
    for (const auto& [state, n] : byState) {
      auto& g = impl_->jobGauges[state];
      if (!g) g = &impl_->jobs.Add({{"state", state}});
      g->Set(n);
    }
    for (const auto& informer : c->informers()) {
      auto s = informer->stats();
      const std::string& res = informer->resource().plural;
      impl_->relists.Add({{"resource", res}}).Set(s.lists);
      impl_->errors.Add({{"resource", res}}).Set(s.errors);
    }
  }
  return impl_->registry->Collect();
}

}  // namespace rpcjob::op
