#include "detail/eligibility.h"

#include <algorithm>

namespace rpcjob::planner::detail {
namespace {

bool tolerates(const api::Toleration& t, const Taint& taint) {
  if (!t.effect.empty() && t.effect != taint.effect) return false;
  if (t.key.empty()) return t.op == "Exists";  // tolerates every taint
  if (t.key != taint.key) return false;
  return t.op == "Exists" || t.value == taint.value;
}

bool matches(const api::NodeSelectorRequirement& r, const Node& node) {
  const auto it = node.labels.find(r.key);
  const bool has = it != node.labels.end();
  const bool listed =
      has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
  switch (r.op) {
    case api::SelectorOperator::In:
      return listed;
    case api::SelectorOperator::NotIn:
      return !listed;
    case api::SelectorOperator::Exists:
      return has;
    case api::SelectorOperator::DoesNotExist:
      return !has;
  }
  return false;
}

std::string taintText(const Taint& t) {
  return t.key + (t.value.empty() ? "" : "=" + t.value) + ":" + t.effect;
}

std::string join(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ",") + v;
  return out;
}

std::string requirementText(const api::NodeSelectorRequirement& r) {
  switch (r.op) {
    case api::SelectorOperator::In:
      return r.key + " in (" + join(r.values) + ")";
    case api::SelectorOperator::NotIn:
      return r.key + " notin (" + join(r.values) + ")";
    case api::SelectorOperator::Exists:
      return r.key;
    case api::SelectorOperator::DoesNotExist:
      return "!" + r.key;
  }
  return r.key;
}

}  // namespace

std::string ineligibility(const Node& node, const api::PodTemplate& t) {
  if (!node.ready) return "not ready";
  if (node.unschedulable) return "cordoned";
  for (const auto& [key, value] : t.nodeSelector) {
    const auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return "no label " + key + "=" + value;
  }
  if (!t.requiredNodeAffinity.empty()) {
    // Kubernetes: a term with no expressions matches nothing; terms are ORed.
    const bool any =
        std::any_of(t.requiredNodeAffinity.begin(), t.requiredNodeAffinity.end(),
                    [&](const api::NodeSelectorTerm& term) {
                      return !term.matchExpressions.empty() &&
                             std::all_of(term.matchExpressions.begin(), term.matchExpressions.end(),
                                         [&](const auto& r) { return matches(r, node); });
                    });
    if (!any) return "node affinity not matched";
  }
  for (const auto& taint : node.taints) {
    if (taint.effect == "PreferNoSchedule") continue;  // a preference, not a filter
    const bool tolerated = std::any_of(t.tolerations.begin(), t.tolerations.end(),
                                       [&](const auto& tol) { return tolerates(tol, taint); });
    if (!tolerated) return "taint " + taintText(taint);
  }
  return "";
}

std::string describeConstraints(const api::PodTemplate& t) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : t.nodeSelector) parts.push_back(key + "=" + value);
  for (std::size_t i = 0; i < t.requiredNodeAffinity.size(); ++i) {
    std::vector<std::string> exprs;
    for (const auto& r : t.requiredNodeAffinity[i].matchExpressions)
      exprs.push_back(requirementText(r));
    parts.push_back((t.requiredNodeAffinity.size() > 1 ? "one of: " : "") + join(exprs));
  }
  if (parts.empty()) return "any ready node";
  std::string out = "nodes with ";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out;
}

}  // namespace rpcjob::planner::detail
