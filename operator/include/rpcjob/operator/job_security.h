#pragma once
// What keeps other tenants away from a job's workers (issue 21), created with
// the job and owned by it (gone with it by garbage collection):
//
//  - Secret "<job>-rpc-secret": key "secret" = 64 hex digits from getrandom (256
//    bits), created once and never read back, logged or put in status or events
//    (the operator's RBAC has `create` on secrets, not get/list/watch). Mounted
//    read-only (mode 0440: root and the pod's fsGroup, which a non-root worker needs) at kSecretDir
//    in every worker container, with RPCJOB_SECRET_FILE=kSecretPath: the workers' pipes
//    authenticate with it (worker/src/auth/).
//  - NetworkPolicy "<job>-rpc" (unless turned off: clusters without a policy
//    engine): the job's pods admit ingress from the job's own pods (any port:
//    TensorPipe's transports and channel lanes listen beyond the RPC port) and,
//    on the metrics ports, from the chart's selector (default: the namespace
//    "monitoring", where the Prometheus of the chart's ServiceMonitor runs).
//
// The JSON builders are pure; ensureJobSecurity() is the I/O, called when the
// reconciler is about to create worker pods (AlreadyExists is success: the
// Secret keeps its first value).

#include <string>
#include <vector>

#include "rpcjob/operator/children.h"

namespace rpcjob::kube {
class Client;
}

namespace rpcjob::op {

inline constexpr const char* kSecretKey = "secret";
inline constexpr const char* kSecretDir = "/var/run/rpcjob";
inline constexpr const char* kSecretPath = "/var/run/rpcjob/secret";
inline constexpr const char* kSecretVolume = "rpcjob-secret";

struct NetworkPolicyOptions {
  bool enabled = true;
  // A NetworkPolicyPeer (JSON) allowed to reach the metrics ports.
  std::string metricsFrom =
      R"({"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}})";
};

std::string jobSecretName(const std::string& job);      // "<job>-rpc-secret"
std::string networkPolicyName(const std::string& job);  // "<job>-rpc"

// `hexSecret`: the secret's text (the workers read the file's bytes as the key).
std::string secretJson(const JobRef& job, const std::string& hexSecret);
// Throws std::invalid_argument when options.metricsFrom is not a JSON object.
std::string networkPolicyJson(const JobRef& job, const std::vector<int>& metricsPorts,
                              const NetworkPolicyOptions& options);
// The distinct metrics ports of the assignment's workers (0: none).
std::vector<int> metricsPortsOf(const Assignment& assignment);
// 64 hex digits from getrandom(2).
std::string randomHexSecret();

// Creates the Secret and (when enabled) the NetworkPolicy if they are missing.
void ensureJobSecurity(kube::Client& client, const JobRef& job,
                       const std::vector<int>& metricsPorts, const NetworkPolicyOptions& options);

}  // namespace rpcjob::op
