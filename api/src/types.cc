#include "rpcjob/api/types.h"

namespace rpcjob::api {

const char* toString(PlacementPolicy policy) {
  return policy == PlacementPolicy::Pack ? "Pack" : "Spread";
}

const char* toString(WorkersPerPod workersPerPod) {
  return workersPerPod == WorkersPerPod::One ? "1" : "Auto";
}

const char* toString(DeviceMapMode mode) {
  return mode == DeviceMapMode::Auto ? "Auto" : "Explicit";
}

const char* toString(CleanPodPolicy policy) {
  switch (policy) {
    case CleanPodPolicy::None:
      return "None";
    case CleanPodPolicy::Running:
      return "Running";
    case CleanPodPolicy::All:
      return "All";
  }
  return "Running";
}

const char* toString(SelectorOperator op) {
  switch (op) {
    case SelectorOperator::In:
      return "In";
    case SelectorOperator::NotIn:
      return "NotIn";
    case SelectorOperator::Exists:
      return "Exists";
    case SelectorOperator::DoesNotExist:
      return "DoesNotExist";
  }
  return "In";
}

}  // namespace rpcjob::api
