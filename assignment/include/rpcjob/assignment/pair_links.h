#pragma once
// What two workers of one table talk over and how their CUDA devices map: derived
// from the compact worker table (assignment.h), never stored in it. The planner
// shows these (status, `rpcjob plan`); the runtime builds its device maps from
// them. One definition, so the two never disagree.
//
// Rules (the planner's table, plan.h):
//  - same pod (locally: both without a pod on the same node): transports shm, uv;
//    CPU channels rpcjob_cma, cma, basic; CUDA channels cuda_nvlink, cuda_ipc,
//    cuda_basic. xth and cuda_xth are never listed: two workers are two processes.
//  - different pods: transports ibv (both nodes RDMA), uv; CPU channels mpt,
//    basic; CUDA channels cuda_gdr (both nodes RDMA), cuda_basic. Pods never share
//    PID, IPC or network namespaces, so shm and cma do not cross pods.
//  - CUDA channels only when both workers have GPUs. Filtered by the job's allowed
//    transports/channels, in their order when given; else CUDA first, then CPU.
//  - device map from a to b: a's explicit map to b; else the inverse of b's explicit
//    map to a; else, in Auto mode, when the pair has a CUDA channel, a's k-th GPU to
//    b's k-th for k < min(|a.gpus|, |b.gpus|); else none. The map from b to a is
//    always the inverse.
//
// Pure: no I/O. Thread-safety: functions of their arguments only.

#include <map>
#include <string>
#include <vector>

#include "rpcjob/assignment/assignment.h"

namespace rpcjob {

// Where two workers are relative to each other: all the link rules depend on.
struct PairPlace {
  bool samePod = false;   // one pod, or one machine for local runs
  bool bothRdma = false;  // both nodes have RDMA
  bool bothGpus = false;  // both workers have GPUs
};

struct PairLink {
  std::vector<std::string> transports;  // usable, in priority order
  std::vector<std::string> channels;    // CUDA and CPU channels, in priority order
  bool hasCpuChannel = false;
  bool hasCudaChannel = false;

  bool uses(const std::string& name) const;
};

// The rules above for one kind of pair, given the job's allowed lists.
PairLink linkFor(const PairPlace& place, const std::vector<std::string>& transports,
                 const std::vector<std::string>& channels);

PairPlace placeOf(const Assignment& table, const WorkerEntry& a, const WorkerEntry& b);
PairLink linkBetween(const Assignment& table, const WorkerEntry& a, const WorkerEntry& b);

// The map `from` uses for tensors it sends to `to` ({local device -> peer device});
// empty when the pair has none.
DeviceMap deviceMapBetween(const Assignment& table, const WorkerEntry& from, const WorkerEntry& to);

// One worker's row, by peer name: its non-empty device maps (what the runtime
// needs), and its channels to every peer (what status shows). O(workers).
// Throws AssignmentError when `worker` is not in the table.
std::map<std::string, DeviceMap> deviceMapsOf(const Assignment& table, const std::string& worker);
std::map<std::string, std::vector<std::string>> channelsOf(const Assignment& table,
                                                           const std::string& worker);

}  // namespace rpcjob
