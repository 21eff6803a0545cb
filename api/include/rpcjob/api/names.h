#pragma once
// Names derived from an RpcJob: worker names, pod names, and the DNS rules they
// obey. Everyone who names a worker or a pod calls these, so names agree.

#include <string>
#include <vector>

#include "rpcjob/api/types.h"

namespace rpcjob::api {

// The bound on the total number of workers in one job (the CRD's CEL rule says
// the same). Beyond it the all-pairs device maps and channel tables stop being
// small (1024 workers: about a million pairs).
inline constexpr int kMaxWorkers = 1024;
inline constexpr std::size_t kMaxDnsLabel = 63;

// RFC 1123 label: a-z, 0-9, '-', alphanumeric at both ends, at most 63 characters.
bool isDnsLabel(const std::string& s);
// RFC 1035 label (a Service name): a DNS label that starts with a letter.
bool isDns1035Label(const std::string& s);

// "master" for a group with one replica, else "<group><index>" ("worker0").
std::string workerName(const WorkerGroup& group, int index);
// The names of all workers, groups in spec order, indices ascending.
std::vector<std::string> workerNames(const RpcJobSpec& spec);
// Pod of one worker when workersPerPod is 1: "<job>-<group>-<index>".
std::string workerPodName(const std::string& job, const std::string& group, int index);
// Pod number k of a job with workersPerPod Auto: "<job>-pod<k>".
std::string sharedPodName(const std::string& job, int k);

int totalWorkers(const RpcJobSpec& spec);

}  // namespace rpcjob::api
