#pragma once
// The rules of the `restricted` Pod Security Standard that worker pods rely on,
// checked on a Pod as JSON/YAML (v1.20's API server has no PodSecurity admission,
// so the tests check the pods themselves). Returns one line per violation.
//  - no hostNetwork, hostPID, hostIPC; volumes of the restricted kinds only (no hostPath);
//  - every container: not privileged, allowPrivilegeEscalation false, capabilities
//    drop ALL and add nothing but NET_BIND_SERVICE, runAsNonRoot true (its own or
//    the pod's), runAsUser not 0, seccompProfile RuntimeDefault or Localhost (its
//    own or the pod's).

#include <yaml-cpp/yaml.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rpcjob::op::testing {

inline std::vector<std::string> restrictedViolations(const YAML::Node& pod) {
  std::vector<std::string> v;
  const YAML::Node spec = pod["spec"];
  for (const char* host : {"hostNetwork", "hostPID", "hostIPC"}) {
    if (spec[host] && spec[host].as<bool>()) v.push_back(std::string(host) + " true");
  }
  static const std::set<std::string> kVolumeKinds = {
      "configMap", "csi",    "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
      "projected", "secret", "name"};
  for (const auto& vol : spec["volumes"]) {
    for (const auto& kv : vol) {
      if (!kVolumeKinds.count(kv.first.Scalar())) {
        v.push_back("volume " + vol["name"].Scalar() + " of kind " + kv.first.Scalar());
      }
    }
  }
  const YAML::Node podSc = spec["securityContext"];
  auto boolAt = [](const YAML::Node& n, const char* key) {
    return n && n[key] ? std::optional<bool>(n[key].as<bool>()) : std::nullopt;
  };
  auto seccompOk = [](const YAML::Node& sc) {
    if (!sc || !sc["seccompProfile"]) return false;
    const std::string type = sc["seccompProfile"]["type"].as<std::string>("");
    return type == "RuntimeDefault" || type == "Localhost";
  };
  if (podSc && podSc["runAsUser"] && podSc["runAsUser"].as<long>() == 0) {
    v.push_back("pod runAsUser 0");
  }
  for (const char* list : {"initContainers", "containers"}) {
    for (const auto& c : spec[list]) {
      const std::string name = "container " + c["name"].as<std::string>("");
      const YAML::Node sc = c["securityContext"];
      if (boolAt(sc, "privileged").value_or(false)) v.push_back(name + " privileged");
      if (boolAt(sc, "allowPrivilegeEscalation") != std::optional<bool>(false)) {
        v.push_back(name + " allowPrivilegeEscalation not false");
      }
      bool dropsAll = false;
      if (sc && sc["capabilities"]) {
        for (const auto& d : sc["capabilities"]["drop"]) dropsAll = dropsAll || d.Scalar() == "ALL";
        for (const auto& a : sc["capabilities"]["add"]) {
          if (a.Scalar() != "NET_BIND_SERVICE") v.push_back(name + " adds " + a.Scalar());
        }
      }
      if (!dropsAll) v.push_back(name + " does not drop ALL");
      const auto nonRoot =
          boolAt(sc, "runAsNonRoot") ? boolAt(sc, "runAsNonRoot") : boolAt(podSc, "runAsNonRoot");
      if (nonRoot != std::optional<bool>(true)) v.push_back(name + " runAsNonRoot not true");
      if (sc && sc["runAsUser"] && sc["runAsUser"].as<long>() == 0) {
        v.push_back(name + " runAsUser 0");
      }
      if (!seccompOk(sc) && !(seccompOk(podSc) && !(sc && sc["seccompProfile"]))) {
        v.push_back(name + " seccompProfile neither RuntimeDefault nor Localhost");
      }
    }
  }
  return v;
}

}  // namespace rpcjob::op::testing
