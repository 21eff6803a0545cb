#pragma once
// The operator's own Prometheus metrics, served with metrics/'s HttpServer on
// /metrics beside /healthz and /readyz:
//
//   rpcjob_operator_reconciles_total{result="success|error"}   counter
//   rpcjob_operator_reconcile_duration_seconds                  histogram
//   rpcjob_operator_workqueue_depth                             gauge (at scrape)
//   rpcjob_operator_jobs{state}                                 gauge (at scrape; status.phase,
//                                                               "Pending" when none yet)
//   rpcjob_operator_leader                                      gauge, 1 while leading
//   rpcjob_operator_informer_relists_total{resource}            gauge (at scrape)
//   rpcjob_operator_informer_errors_total{resource}             gauge (at scrape)
//
// Thread-safety: every method may be called from any thread.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

namespace rpcjob::op {

class Controller;

class OperatorMetrics {
 public:
  OperatorMetrics();
  ~OperatorMetrics();

  void observeReconcile(std::chrono::duration<double> took, bool ok);
  void setLeader(bool leader);
  // The controller whose queue, caches and informers the scrape reads; nullptr
  // before it exists.
  void watchController(const Controller* controller);

  // For the HTTP server: refreshes the scrape-time gauges, then collects.
  std::vector<prometheus::MetricFamily> collect();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rpcjob::op
