#include "rpcjob/operator/resource.h"

namespace rpcjob::kube {

std::string Resource::collectionPath(const std::string& ns) const {
  std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
  return p + "/" + plural;
}

std::string Resource::itemPath(const std::string& ns, const std::string& name,
                               const std::string& subresource) const {
  std::string p = collectionPath(ns) + "/" + name;
  if (!subresource.empty()) p += "/" + subresource;
  return p;
}

namespace resources {
const Resource kPods{"", "v1", "pods", "Pod", true};
const Resource kServices{"", "v1", "services", "Service", true};
const Resource kConfigMaps{"", "v1", "configmaps", "ConfigMap", true};
const Resource kSecrets{"", "v1", "secrets", "Secret", true};
const Resource kNetworkPolicies{"networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy",
                                true};
const Resource kNodes{"", "v1", "nodes", "Node", false};
const Resource kEvents{"", "v1", "events", "Event", true};
const Resource kNamespaces{"", "v1", "namespaces", "Namespace", false};
const Resource kServiceAccounts{"", "v1", "serviceaccounts", "ServiceAccount", true};
const Resource kLeases{"coordination.k8s.io", "v1", "leases", "Lease", true};
const Resource kCustomResourceDefinitions{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                          "CustomResourceDefinition", false};
const Resource kRpcJobs{"rpcjob.dev", "v1alpha1", "rpcjobs", "RpcJob", true};
}  // namespace resources

std::string urlEncode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

}  // namespace rpcjob::kube
