#include "cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "cgroup_files.h"

namespace rpcjob::runtime {
namespace {

std::optional<long long> wholeNumber(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') return std::nullopt;
  return value;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

std::optional<double> parseCgroupCpuMax(const std::string& contents) {
  std::istringstream in(contents);
  std::string quota, period, extra;
  if (!(in >> quota >> period) || (in >> extra)) return std::nullopt;
  const auto q = wholeNumber(quota);
  const auto p = wholeNumber(period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;  // "max": no limit
  return static_cast<double>(*q) / static_cast<double>(*p);
}

std::optional<double> parseCgroupCfsQuota(const std::string& quota, const std::string& period) {
  const auto q = wholeNumber(trimmed(quota));
  const auto p = wholeNumber(trimmed(period));
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;  // -1: no limit
  return static_cast<double>(*q) / static_cast<double>(*p);
}

double availableCpus() {
  double cpus = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  const std::string groups = readWholeFile("/proc/self/cgroup");
  const std::string v2 = ownCgroup(groups, "");
  const std::string v1 = ownCgroup(groups, "cpu");
  for (const std::string& path : {v2.empty() ? std::string() : "/sys/fs/cgroup" + v2 + "/cpu.max",
                                  std::string("/sys/fs/cgroup/cpu.max")}) {
    if (path.empty()) continue;
    if (auto quota = parseCgroupCpuMax(readWholeFile(path))) cpus = std::min(cpus, *quota);
  }
  for (const std::string& dir : {v1.empty() ? std::string() : "/sys/fs/cgroup/cpu" + v1,
                                 std::string("/sys/fs/cgroup/cpu")}) {
    if (dir.empty()) continue;
    if (auto quota = parseCgroupCfsQuota(readWholeFile(dir + "/cpu.cfs_quota_us"),
                                         readWholeFile(dir + "/cpu.cfs_period_us"))) {
      cpus = std::min(cpus, *quota);
    }
  }
  return std::max(1.0, cpus);
}

}  // namespace rpcjob::runtime
