#include "rpcjob/operator/pod_security.h"

#include <algorithm>

#include "json_util.h"

namespace rpcjob::op {
namespace {

using web::json::value;

value objectOr(const std::string& text) {
  if (text.empty()) return value::object();
  auto v = kube::detail::parseJson(text);
  return v && v->is_object() ? *v : value::object();
}

void setIfAbsent(value& o, const char* key, value v) {
  if (!o.has_field(key)) o[key] = std::move(v);
}

bool contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

}  // namespace

PodSecurityLevel podSecurityLevel(const std::string& enforceLabel) {
  if (enforceLabel.empty() || enforceLabel == "privileged") return PodSecurityLevel::Privileged;
  if (enforceLabel == "baseline") return PodSecurityLevel::Baseline;
  return PodSecurityLevel::Restricted;
}

const char* toString(PodSecurityLevel level) {
  switch (level) {
    case PodSecurityLevel::Privileged:
      return "privileged";
    case PodSecurityLevel::Baseline:
      return "baseline";
    case PodSecurityLevel::Restricted:
      return "restricted";
  }
  return "restricted";
}

bool capabilityAllowed(PodSecurityLevel level, const std::string& cap) {
  // The Pod Security Standards' lists: baseline, the container runtimes' default set;
  // restricted, NET_BIND_SERVICE only.
  static const std::vector<std::string> kBaseline = {
      "AUDIT_WRITE",      "CHOWN",   "DAC_OVERRIDE", "FOWNER",  "FSETID", "KILL",      "MKNOD",
      "NET_BIND_SERVICE", "SETFCAP", "SETGID",       "SETPCAP", "SETUID", "SYS_CHROOT"};
  switch (level) {
    case PodSecurityLevel::Privileged:
      return true;
    case PodSecurityLevel::Baseline:
      return contains(kBaseline, cap);
    case PodSecurityLevel::Restricted:
      return cap == "NET_BIND_SERVICE";
  }
  return false;
}

std::vector<LeftOut> leftOutBy(PodSecurityLevel level) {
  // ibv and cuda_gdr register (pin) memory for the HCA: beyond a small
  // RLIMIT_MEMLOCK that takes IPC_LOCK, which the planner asks for.
  std::vector<LeftOut> out;
  for (const char* name : {"ibv", "cuda_gdr"}) {
    if (!capabilityAllowed(level, "IPC_LOCK")) out.push_back({name, "IPC_LOCK"});
  }
  return out;
}

std::vector<std::string> withoutLeftOut(const std::vector<std::string>& names,
                                        const std::vector<std::string>& known,
                                        const std::vector<LeftOut>& out) {
  auto isOut = [&](const std::string& n) {
    return std::any_of(out.begin(), out.end(), [&](const LeftOut& l) { return l.name == n; });
  };
  const std::vector<std::string>& from = names.empty() ? known : names;
  if (std::none_of(from.begin(), from.end(), isOut)) return names;
  std::vector<std::string> kept;
  for (const auto& n : from) {
    if (!isOut(n)) kept.push_back(n);
  }
  return kept;
}

PodSecurityResult podSecurity(const PodSecurityInput& in) {
  PodSecurityResult r;
  value pod = objectOr(in.podSecurityContext);
  value c = objectOr(in.containerSecurityContext);
  // Defaults the API or the kubelet would refuse beside the template's own fields
  // are left out: runAsNonRoot beside an explicit uid 0 (the container would not
  // start), allowPrivilegeEscalation false beside privileged or SYS_ADMIN (invalid).
  auto isRoot = [](const value& o) {
    return o.has_field("runAsUser") && o.at("runAsUser").is_integer() &&
           o.at("runAsUser").as_number().to_int64() == 0;
  };
  if (!isRoot(pod) && !isRoot(c)) setIfAbsent(pod, "runAsNonRoot", value::boolean(true));
  setIfAbsent(pod, "runAsUser", value::number(kWorkerUserId));
  setIfAbsent(pod, "runAsGroup", value::number(kWorkerUserId));
  setIfAbsent(pod, "fsGroup", value::number(kWorkerUserId));
  if (!pod.has_field("seccompProfile"))
    pod["seccompProfile"]["type"] = value::string("RuntimeDefault");

  bool sysAdmin = false;
  if (c.has_object_field("capabilities") && c.at("capabilities").has_array_field("add")) {
    for (const auto& a : c.at("capabilities").at("add").as_array()) {
      sysAdmin = sysAdmin || (a.is_string() &&
                              (a.as_string() == "SYS_ADMIN" || a.as_string() == "CAP_SYS_ADMIN"));
    }
  }
  const bool privileged =
      c.has_field("privileged") && c.at("privileged").is_boolean() && c.at("privileged").as_bool();
  if (!privileged && !sysAdmin) setIfAbsent(c, "allowPrivilegeEscalation", value::boolean(false));
  if (!c.has_field("capabilities") || !c.at("capabilities").is_object()) {
    c["capabilities"] = value::object();
    c["capabilities"]["drop"][0] = value::string("ALL");
  }
  std::vector<std::string> add;
  for (const auto& cap : in.capabilities) {
    if (!capabilityAllowed(in.level, cap)) {
      if (!contains(r.omitted, cap)) r.omitted.push_back(cap);
    } else if (!contains(add, cap)) {
      add.push_back(cap);
    }
  }
  if (!add.empty()) {
    value& caps = c["capabilities"];
    if (!caps.has_array_field("add")) caps["add"] = value::array();
    value& list = caps["add"];
    for (const auto& cap : add) {
      bool has = false;
      for (const auto& a : list.as_array()) has = has || (a.is_string() && a.as_string() == cap);
      if (!has) list[list.size()] = value::string(cap);
    }
  }
  r.podSecurityContext = pod.serialize();
  r.containerSecurityContext = c.serialize();
  return r;
}

}  // namespace rpcjob::op
