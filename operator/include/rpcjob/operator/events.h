#pragma once
// Kubernetes Events (core v1) about an object, as `kubectl describe` shows them.
// Best effort: a failure to record is logged, never thrown (an event must not
// fail a reconcile). No aggregation of repeats yet: each call creates one Event.
//
// Thread-safety: record() may be called from any thread.

#include <memory>
#include <string>

#include "rpcjob/operator/client.h"

namespace rpcjob::kube {

class EventRecorder {
 public:
  EventRecorder(std::shared_ptr<Client> client, std::string component);

  // type: "Normal" or "Warning"; reason: CamelCase ("Unschedulable").
  // Returns false when the Event could not be created.
  bool record(const Object& involved, const std::string& type, const std::string& reason,
              const std::string& message);

 private:
  std::shared_ptr<Client> client_;
  std::string component_;
};

}  // namespace rpcjob::kube
