#pragma once
// A described cluster, for `rpcjob plan job.yaml --nodes nodes.yaml`:
//
//   nodes:
//     - name: gpu-a            # required, unique
//       gpus: 8                # allocatable nvidia.com/gpu (default 0)
//       cpu: "64"              # allocatable cpu, a quantity (default 64)
//       memory: 512Gi          # allocatable memory, a quantity (default 256Gi)
//       rdma: true             # shorthand for the label rpcjob.dev/rdma: "true"
//       nvlink: true           # shorthand for the label rpcjob.dev/nvlink: "true"
//       rdmaHca: 16            # allocatable rdma/hca (default 0)
//       labels: {zone: a}
//       taints: [{key: dedicated, value: ml, effect: NoSchedule}]
//       ready: true            # default true
//       unschedulable: false   # default false (cordoned)
//       used: {gpus: 2, cpu: "4", memory: 16Gi}   # what running pods use already
//
// Strict like the RpcJob parser: unknown fields and wrong types are errors, each
// with its path and line. Parsing only; reading the file is the caller's business.

#include <string>
#include <vector>

#include "rpcjob/api/errors.h"
#include "rpcjob/planner/cluster.h"

namespace rpcjob::planner {

inline constexpr const char* kDefaultNodeCpu = "64";
inline constexpr const char* kDefaultNodeMemory = "256Gi";

struct ClusterParseResult {
  ClusterView cluster;
  std::vector<api::FieldError> errors;
  bool ok() const { return errors.empty(); }
};

ClusterParseResult parseClusterYaml(const std::string& text);

}  // namespace rpcjob::planner
