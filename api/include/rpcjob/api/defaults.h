#pragma once
// The defaults of RpcJob fields, in one place. The CRD (crds/rpcjob.yaml) carries
// the same values as `default:`; tests/api/crd_agreement_test.cc checks they agree.
//
// Defaults are applied while parsing (a field that is absent keeps the value the
// types in types.h start with); these constants are those values, by field path.

#include <cstdint>

namespace rpcjob::api {

inline constexpr int kDefaultReplicas = 1;                      // spec.workers[].replicas
inline constexpr int kDefaultGpusPerWorker = 0;                 // spec.workers[].gpusPerWorker
inline constexpr const char* kDefaultPlacementPolicy = "Pack";  // spec.placement.policy
inline constexpr const char* kDefaultWorkersPerPod = "1";       // spec.placement.workersPerPod
inline constexpr int kDefaultWorkersPerGpu = 1;                 // spec.placement.workersPerGpu
inline constexpr int kMaxWorkersPerGpu = 16;
inline constexpr const char* kDefaultDeviceMapMode = "Auto";      // spec.deviceMaps.mode
inline constexpr int kDefaultBackoffLimit = 3;                    // spec.runPolicy.backoffLimit
inline constexpr bool kDefaultSuspend = false;                    // spec.runPolicy.suspend
inline constexpr const char* kDefaultCleanPodPolicy = "Running";  // spec.runPolicy.cleanPodPolicy
inline constexpr int kDefaultMetricsPort = 9400;                  // spec.metrics.port
inline constexpr bool kDefaultPerPeerLabels = true;               // spec.metrics.perPeerLabels

}  // namespace rpcjob::api
