#include "rpcjob/operator/events.h"

#include <ctime>

#include "json_util.h"
#include "rpcjob/operator/log.h"

namespace rpcjob::kube {

EventRecorder::EventRecorder(std::shared_ptr<Client> client, std::string component)
    : client_(std::move(client)), component_(std::move(component)) {}

bool EventRecorder::record(const Object& involved, const std::string& type,
                           const std::string& reason, const std::string& message) {
  using web::json::value;
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string ns =
      involved.metadata.namespace_.empty() ? "default" : involved.metadata.namespace_;

  value ev = value::object();
  ev["apiVersion"] = value::string("v1");
  ev["kind"] = value::string("Event");
  ev["metadata"]["generateName"] = value::string(involved.metadata.name + ".");
  ev["metadata"]["namespace"] = value::string(ns);
  value& obj = ev["involvedObject"];
  obj["apiVersion"] = value::string(involved.apiVersion);
  obj["kind"] = value::string(involved.kind);
  obj["name"] = value::string(involved.metadata.name);
  if (!involved.metadata.namespace_.empty()) {
    obj["namespace"] = value::string(involved.metadata.namespace_);
  }
  obj["uid"] = value::string(involved.metadata.uid);
  obj["resourceVersion"] = value::string(involved.metadata.resourceVersion);
  ev["type"] = value::string(type);
  ev["reason"] = value::string(reason);
  ev["message"] = value::string(message.substr(0, 1024));
  ev["firstTimestamp"] = value::string(ts);
  ev["lastTimestamp"] = value::string(ts);
  ev["count"] = value::number(1);
  ev["source"]["component"] = value::string(component_);
  ev["reportingComponent"] = value::string(component_);
  try {
    // +rpcjob:rbac:groups="",resources=events,verbs=create
    client_->create(resources::kEvents, ns, ev.serialize());
    return true;
  } catch (const ApiError& e) {
    KLOG_WARN("events",
              "recording " << reason << " on " << involved.metadata.key() << ": " << e.what());
    return false;
  }
}

}  // namespace rpcjob::kube
