#pragma once
// Where each worker listens: the part of the assignment that depends on how the
// job is run, so the caller decides. The operator uses the job's headless Service
// names, `rpcjob run` loopback with a port per worker; tests may use anything.

#include <functional>
#include <string>

#include "rpcjob/api/types.h"

namespace rpcjob::planner {

inline constexpr int kDefaultRpcPort = 29500;

struct WorkerPlacement;

struct Endpoint {
  std::string address;  // host:port of the RPC listener
  int metricsPort = 0;  // 0: none
};

using EndpointFn = std::function<Endpoint(const WorkerPlacement&)>;

// "<pod>.<job>.<namespace>.svc[.<clusterDomain>]:<rpcPort + indexInPod>"; metrics on
// spec.metrics.port + indexInPod (workers sharing a pod need distinct ports). The
// pods must set hostname = pod name and subdomain = job name (the Service).
EndpointFn headlessServiceEndpoints(const api::RpcJob& job, int rpcPort = kDefaultRpcPort,
                                    const std::string& clusterDomain = "");

// "127.0.0.1:<firstRpcPort + rank>"; metrics on firstMetricsPort + rank (0: none).
EndpointFn localEndpoints(int firstRpcPort, int firstMetricsPort);

}  // namespace rpcjob::planner
