#include "rpcjob/api/names.h"

namespace rpcjob::api {

bool isDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > kMaxDnsLabel) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

bool isDns1035Label(const std::string& s) {
  return isDnsLabel(s) && s.front() >= 'a' && s.front() <= 'z';
}

std::string workerName(const WorkerGroup& group, int index) {
  if (group.replicas == 1) return group.name;
  return group.name + std::to_string(index);
}

std::vector<std::string> workerNames(const RpcJobSpec& spec) {
  std::vector<std::string> names;
  for (const auto& group : spec.workers) {
    for (int i = 0; i < group.replicas; ++i) names.push_back(workerName(group, i));
  }
  return names;
}

std::string workerPodName(const std::string& job, const std::string& group, int index) {
  return job + "-" + group + "-" + std::to_string(index);
}

std::string sharedPodName(const std::string& job, int k) {
  return job + "-pod" + std::to_string(k);
}

int totalWorkers(const RpcJobSpec& spec) {
  long total = 0;
  for (const auto& group : spec.workers) total += group.replicas > 0 ? group.replicas : 0;
  return total > kMaxWorkers * 1000L ? kMaxWorkers * 1000 : static_cast<int>(total);
}

}  // namespace rpcjob::api
