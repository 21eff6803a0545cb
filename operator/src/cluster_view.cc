#include "rpcjob/operator/cluster_view.h"

#include <algorithm>

#include "json_util.h"
#include "rpcjob/api/quantity.h"
#include "rpcjob/operator/desired_state.h"

namespace rpcjob::op {
namespace {

using kube::detail::getString;
using web::json::value;

const value* field(const value& v, const char* key) {
  if (!v.is_object()) return nullptr;
  const auto& obj = v.as_object();
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &it->second;
}

// A quantity field: whole units (milli == false) or thousandths.
int64_t quantity(const value& list, const char* key, bool milli) {
  const value* q = field(list, key);
  if (q == nullptr) return 0;
  std::string text = q->is_string() ? q->as_string() : q->serialize();
  auto parsed = api::parseQuantity(text);
  if (!parsed || parsed->milli < 0) return 0;
  return milli ? parsed->milli : parsed->value();
}

planner::Resources resourcesOf(const value& list) {
  planner::Resources r;
  r.gpus = quantity(list, planner::kGpuResource, false);
  r.cpuMilli = quantity(list, "cpu", true);
  r.memoryBytes = quantity(list, "memory", false);
  r.rdma = quantity(list, planner::kRdmaResource, false);
  return r;
}

// A container's requests, each defaulting to its limit.
planner::Resources containerRequests(const value& container) {
  const value* res = field(container, "resources");
  if (res == nullptr) return {};
  planner::Resources limits =
      res->has_object_field("limits") ? resourcesOf(res->at("limits")) : planner::Resources{};
  planner::Resources req;
  const value* requests = field(*res, "requests");
  auto pick = [&](const char* key, int64_t limit, bool milli) {
    return requests && field(*requests, key) ? quantity(*requests, key, milli) : limit;
  };
  req.gpus = pick(planner::kGpuResource, limits.gpus, false);
  req.cpuMilli = pick("cpu", limits.cpuMilli, true);
  req.memoryBytes = pick("memory", limits.memoryBytes, false);
  req.rdma = pick(planner::kRdmaResource, limits.rdma, false);
  return req;
}

planner::Resources maxOf(const planner::Resources& a, const planner::Resources& b) {
  return {std::max(a.gpus, b.gpus), std::max(a.cpuMilli, b.cpuMilli),
          std::max(a.memoryBytes, b.memoryBytes), std::max(a.rdma, b.rdma)};
}

}  // namespace

planner::Node nodeFromJson(const std::string& nodeJson) {
  planner::Node node;
  node.ready = false;
  auto v = kube::detail::parseJson(nodeJson);
  if (!v || !v->is_object()) return node;
  if (const value* meta = field(*v, "metadata")) {
    node.name = getString(*meta, "name");
    if (const value* labels = field(*meta, "labels"); labels && labels->is_object()) {
      for (const auto& [k, l] : labels->as_object()) {
        node.labels[k] = l.is_string() ? l.as_string() : l.serialize();
      }
    }
  }
  if (const value* spec = field(*v, "spec")) {
    const value* u = field(*spec, "unschedulable");
    node.unschedulable = u && u->is_boolean() && u->as_bool();
    if (const value* taints = field(*spec, "taints"); taints && taints->is_array()) {
      for (const auto& t : taints->as_array()) {
        node.taints.push_back({getString(t, "key"), getString(t, "value"), getString(t, "effect")});
      }
    }
  }
  if (const value* status = field(*v, "status")) {
    if (const value* alloc = field(*status, "allocatable")) node.allocatable = resourcesOf(*alloc);
    if (const value* conds = field(*status, "conditions"); conds && conds->is_array()) {
      for (const auto& c : conds->as_array()) {
        if (getString(c, "type") == "Ready") node.ready = getString(c, "status") == "True";
      }
    }
  }
  return node;
}

planner::Resources podRequests(const std::string& podJson) {
  auto v = kube::detail::parseJson(podJson);
  if (!v) return {};
  const value* spec = field(*v, "spec");
  if (spec == nullptr) return {};
  planner::Resources sum;
  if (const value* cs = field(*spec, "containers"); cs && cs->is_array()) {
    for (const auto& c : cs->as_array()) sum += containerRequests(c);
  }
  if (const value* init = field(*spec, "initContainers"); init && init->is_array()) {
    for (const auto& c : init->as_array()) sum = maxOf(sum, containerRequests(c));
  }
  return sum;
}

std::string podNode(const std::string& podJson) {
  auto node = kube::jsonString(podJson, "/spec/nodeName");
  if (node && !node->empty()) return *node;
  return kube::jsonString(podJson, "/metadata/annotations/rpcjob.dev~1node").value_or("");
}

bool podHoldsResources(const std::string& podJson) {
  if (podNode(podJson).empty()) return false;
  auto phase = kube::jsonString(podJson, "/status/phase").value_or("");
  return phase != "Succeeded" && phase != "Failed";
}

std::optional<std::chrono::system_clock::time_point> nodeReadySince(const std::string& nodeJson) {
  auto v = kube::detail::parseJson(nodeJson);
  if (!v || !v->is_object()) return std::nullopt;
  const value* status = field(*v, "status");
  const value* conds = status ? field(*status, "conditions") : nullptr;
  if (conds == nullptr || !conds->is_array()) return std::nullopt;
  for (const auto& c : conds->as_array()) {
    if (getString(c, "type") == "Ready") return parseTime(getString(c, "lastTransitionTime"));
  }
  return std::nullopt;
}

planner::ClusterView clusterViewFrom(const std::vector<kube::ObjectPtr>& nodes,
                                     const std::vector<kube::ObjectPtr>& pods,
                                     const std::string& excludeOwnerUid) {
  planner::ClusterView view;
  for (const auto& n : nodes) view.nodes.push_back(nodeFromJson(n->json));
  std::sort(view.nodes.begin(), view.nodes.end(),
            [](const planner::Node& a, const planner::Node& b) { return a.name < b.name; });
  for (const auto& p : pods) {
    const kube::OwnerReference* owner = p->metadata.controllerRef();
    if (!excludeOwnerUid.empty() && owner && owner->uid == excludeOwnerUid) continue;
    if (!podHoldsResources(p->json)) continue;
    view.used[podNode(p->json)] += podRequests(p->json);
  }
  return view;
}

}  // namespace rpcjob::op
