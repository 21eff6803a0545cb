#pragma once
// The resources the operator reads and writes, and their URL paths.

#include <string>

namespace rpcjob::kube {

struct Resource {
  std::string group;    // "" for core
  std::string version;  // "v1"
  std::string plural;   // "pods"
  std::string kind;     // "Pod"
  bool namespaced = true;

  std::string apiVersion() const { return group.empty() ? version : group + "/" + version; }
  // "/api/v1/namespaces/NS/pods"; ns empty (or a cluster resource): all namespaces.
  std::string collectionPath(const std::string& ns) const;
  // ".../pods/NAME", plus "/SUBRESOURCE" when given.
  std::string itemPath(const std::string& ns, const std::string& name,
                       const std::string& subresource = "") const;
};

namespace resources {
extern const Resource kPods;
extern const Resource kServices;
extern const Resource kConfigMaps;
extern const Resource kSecrets;
extern const Resource kNetworkPolicies;  // networking.k8s.io/v1
extern const Resource kNodes;
extern const Resource kEvents;  // core v1
extern const Resource kNamespaces;
extern const Resource kServiceAccounts;
extern const Resource kLeases;                     // coordination.k8s.io/v1
extern const Resource kCustomResourceDefinitions;  // apiextensions.k8s.io/v1
extern const Resource kRpcJobs;                    // rpcjob.dev/v1alpha1
}  // namespace resources

// Percent-encodes a query parameter value (RFC 3986 unreserved kept).
std::string urlEncode(const std::string& s);

}  // namespace rpcjob::kube
