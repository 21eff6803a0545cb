#include "rpcjob/api/schema.h"

namespace rpcjob::api {

const std::map<std::string, std::set<std::string>>& objectFields() {
  static const std::map<std::string, std::set<std::string>> kFields = {
      {"", {"apiVersion", "kind", "metadata", "spec", "status"}},
      {"spec",
       {"workers", "placement", "deviceMaps", "transports", "channels", "runPolicy", "metrics"}},
      {"spec.workers[]", {"name", "replicas", "gpusPerWorker", "template"}},
      {"spec.placement", {"policy", "workersPerPod", "workersPerGpu"}},
      {"spec.deviceMaps", {"mode", "maps"}},
      {"spec.deviceMaps.maps[]", {"from", "to", "devices"}},
      {"spec.runPolicy",
       {"backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "suspend",
        "cleanPodPolicy"}},
      {"spec.metrics", {"port", "perPeerLabels"}},
      {"status",
       {"phase", "conditions", "observedGeneration", "workerCount", "readyWorkers", "restarts",
        "schedulerRejections", "rejectedNodes", "workers", "startTime", "completionTime"}},
      {"status.conditions[]",
       {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}},
      {"status.workers[]",
       {"name", "rank", "group", "pod", "node", "gpus", "address", "channels", "deviceMaps",
        "phase", "restarts"}},
  };
  return kFields;
}

const std::map<std::string, std::vector<std::string>>& enumFields() {
  static const std::map<std::string, std::vector<std::string>> kEnums = {
      {"spec.placement.policy", {"Pack", "Spread"}},
      {"spec.placement.workersPerPod", {"1", "Auto"}},
      {"spec.deviceMaps.mode", {"Auto", "Explicit"}},
      {"spec.transports[]", {"shm", "ibv", "uv"}},
      {"spec.channels[]",
       {"cuda_nvlink", "cuda_ipc", "cuda_gdr", "cuda_xth", "cuda_basic", "rpcjob_cma", "cma", "mpt",
        "xth", "basic"}},
      {"spec.runPolicy.cleanPodPolicy", {"None", "Running", "All"}},
  };
  return kEnums;
}

}  // namespace rpcjob::api
