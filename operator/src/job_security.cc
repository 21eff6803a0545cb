#include "rpcjob/operator/job_security.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "json_util.h"
#include "owned_metadata.h"
#include "rpcjob/api/types.h"
#include "rpcjob/operator/client.h"
#include "rpcjob/operator/errors.h"
#include "rpcjob/operator/log.h"
#include "rpcjob/operator/resource.h"

namespace rpcjob::op {
namespace {

using web::json::value;

value str(const std::string& s) {
  return value::string(s);
}

void createIfMissing(kube::Client& client, const kube::Resource& resource, const JobRef& job,
                     const std::string& name, const std::string& json) {
  try {
    // +rpcjob:rbac:groups="",resources=secrets,verbs=create
    // +rpcjob:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=create
    client.create(resource, job.ns, json);
    KLOG_INFO("reconcile",
              job.ns << "/" << job.name << ": created " << resource.kind << " " << name);
  } catch (const kube::ApiError& e) {
    if (!e.alreadyExists()) throw;
  }
}

}  // namespace

std::string jobSecretName(const std::string& job) {
  return job + "-rpc-secret";
}

std::string networkPolicyName(const std::string& job) {
  return job + "-rpc";
}

std::string secretJson(const JobRef& job, const std::string& hexSecret) {
  value s = value::object();
  s["apiVersion"] = str("v1");
  s["kind"] = str("Secret");
  s["metadata"] = ownedMetadata(job, jobSecretName(job.name));
  s["type"] = str("Opaque");
  s["immutable"] = value::boolean(true);
  s["stringData"][kSecretKey] = str(hexSecret);
  return s.serialize();
}

std::string networkPolicyJson(const JobRef& job, const std::vector<int>& metricsPorts,
                              const NetworkPolicyOptions& options) {
  auto from = kube::detail::parseJson(options.metricsFrom);
  if (!from || !from->is_object()) {
    throw std::invalid_argument("the NetworkPolicy's metrics peer is not a JSON object: " +
                                options.metricsFrom);
  }
  value ownPods = value::object();
  ownPods["podSelector"]["matchLabels"][kLabelJobName] = str(job.name);
  value peers = value::object();
  peers["from"][0] = ownPods;
  value p = value::object();
  p["apiVersion"] = str("networking.k8s.io/v1");
  p["kind"] = str("NetworkPolicy");
  p["metadata"] = ownedMetadata(job, networkPolicyName(job.name));
  value& spec = p["spec"];
  spec["podSelector"]["matchLabels"][kLabelJobName] = str(job.name);
  spec["policyTypes"][0] = str("Ingress");
  spec["ingress"][0] = peers;
  if (!metricsPorts.empty()) {
    value metrics = value::object();
    metrics["from"][0] = *from;
    for (size_t i = 0; i < metricsPorts.size(); ++i) {
      metrics["ports"][i]["protocol"] = str("TCP");
      metrics["ports"][i]["port"] = value::number(metricsPorts[i]);
    }
    spec["ingress"][1] = metrics;
  }
  return p.serialize();
}

std::vector<int> metricsPortsOf(const Assignment& assignment) {
  std::vector<int> ports;
  for (const auto& w : assignment.workers) {
    if (w.metricsPort > 0 && std::find(ports.begin(), ports.end(), w.metricsPort) == ports.end()) {
      ports.push_back(w.metricsPort);
    }
  }
  std::sort(ports.begin(), ports.end());
  return ports;
}

std::string randomHexSecret() {
  unsigned char bytes[32];
  size_t have = 0;
  while (have < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + have, sizeof(bytes) - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    have += static_cast<size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

void ensureJobSecurity(kube::Client& client, const JobRef& job,
                       const std::vector<int>& metricsPorts, const NetworkPolicyOptions& options) {
  createIfMissing(client, kube::resources::kSecrets, job, jobSecretName(job.name),
                  secretJson(job, randomHexSecret()));
  if (options.enabled) {
    createIfMissing(client, kube::resources::kNetworkPolicies, job, networkPolicyName(job.name),
                    networkPolicyJson(job, metricsPorts, options));
  }
}

}  // namespace rpcjob::op
