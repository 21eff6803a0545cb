#include "rpcjob/planner/endpoints.h"

#include "rpcjob/planner/plan.h"

namespace rpcjob::planner {

EndpointFn headlessServiceEndpoints(const api::RpcJob& job, int rpcPort,
                                    const std::string& clusterDomain) {
  const std::string service = job.metadata.name;
  const std::string ns =
      job.metadata.namespaceName.empty() ? "default" : job.metadata.namespaceName;
  const int metricsPort = job.spec.metrics.port;
  const std::string suffix = clusterDomain.empty() ? "" : "." + clusterDomain;
  return [=](const WorkerPlacement& w) {
    Endpoint e;
    e.address = w.pod + "." + service + "." + ns + ".svc" + suffix + ":" +
                std::to_string(rpcPort + w.indexInPod);
    e.metricsPort = metricsPort == 0 ? 0 : metricsPort + w.indexInPod;
    return e;
  };
}

EndpointFn localEndpoints(int firstRpcPort, int firstMetricsPort) {
  return [=](const WorkerPlacement& w) {
    Endpoint e;
    e.address = "127.0.0.1:" + std::to_string(firstRpcPort + w.rank);
    e.metricsPort = firstMetricsPort == 0 ? 0 : firstMetricsPort + w.rank;
    return e;
  };
}

}  // namespace rpcjob::planner
