#include "rpcjob/runner/local_machine.h"

#include "rpcjob/runner/gpu_topology_nvml.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace rpcjob::runner {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}

// The cgroup v2 directory of this process ("0::/path" in /proc/self/cgroup).
std::string cgroupDir() {
  std::istringstream in(readFile("/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return "";
}

int64_t cpuCount() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

}  // namespace

int64_t parseMemTotal(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemTotal:") return unit.find("kB") != std::string::npos ? value * 1024 : value;
  }
  return 0;
}

std::optional<int64_t> parseCpuMax(const std::string& cpuMax) {
  std::istringstream in(cpuMax);
  std::string quota;
  int64_t period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  try {
    const int64_t q = std::stoll(quota);
    if (q <= 0) return std::nullopt;
    return q * 1000 / period;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<int64_t> parseMemoryMax(const std::string& memoryMax) {
  std::istringstream in(memoryMax);
  std::string value;
  if (!(in >> value) || value == "max") return std::nullopt;
  try {
    const int64_t v = std::stoll(value);
    return v > 0 ? std::optional<int64_t>(v) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int nvmlGpuCount(std::string& why) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml) {
    why = "no NVML (libnvidia-ml.so.1 not found): 0 GPUs";
    return 0;
  }
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned int*);
  auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(dlsym(nvml, "nvmlDeviceGetCount_v2"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlShutdown"));
  int gpus = 0;
  unsigned int n = 0;
  if (!init || !count) {
    why = "NVML lacks nvmlInit_v2/nvmlDeviceGetCount_v2: 0 GPUs";
  } else if (const int rc = init(); rc != 0) {
    why = "nvmlInit_v2 failed (NVML error " + std::to_string(rc) + "): 0 GPUs";
  } else {
    if (const int rc2 = count(&n); rc2 == 0) {
      gpus = static_cast<int>(n);
      why = "NVML";
    } else {
      why = "nvmlDeviceGetCount_v2 failed (NVML error " + std::to_string(rc2) + "): 0 GPUs";
    }
    if (shutdown) shutdown();
  }
  dlclose(nvml);
  return gpus;
}

int64_t detectCpuMilli() {
  int64_t milli = cpuCount() * 1000;
  const std::string cgroup = cgroupDir();
  if (!cgroup.empty()) {
    if (auto cpu = parseCpuMax(readFile(cgroup + "/cpu.max"))) milli = std::min(milli, *cpu);
  }
  return milli;
}

LocalResources detectLocalResources(std::optional<int> gpuOverride) {
  LocalResources r;
  r.cpuMilli = detectCpuMilli();
  r.memoryBytes = parseMemTotal(readFile("/proc/meminfo"));
  const std::string cgroup = cgroupDir();
  if (!cgroup.empty()) {
    if (auto memory = parseMemoryMax(readFile(cgroup + "/memory.max"))) {
      r.memoryBytes = r.memoryBytes > 0 ? std::min(r.memoryBytes, *memory) : *memory;
    }
  }
  if (gpuOverride) {
    r.gpus = *gpuOverride;
    r.gpuSource = "--gpus";
  } else {
    r.gpus = nvmlGpuCount(r.gpuSource);
    std::string why;
    if (r.gpus > 0) r.topology = nvmlGpuTopology(why);
    if (r.topology.gpus != r.gpus) r.topology = {};  // a GPU came or went between the queries
  }
  return r;
}

std::optional<std::pair<int, int>> parsePortRange(const std::string& text) {
  std::istringstream in(text);
  long low = 0, high = 0;
  std::string rest;
  if (!(in >> low >> high) || (in >> rest)) return std::nullopt;
  if (low < 1 || high > 65535 || low > high) return std::nullopt;
  return std::make_pair(static_cast<int>(low), static_cast<int>(high));
}

std::optional<std::pair<int, int>> ephemeralPortRange() {
  return parsePortRange(readFile("/proc/sys/net/ipv4/ip_local_port_range"));
}

bool overlapsPortRange(int first, int count, std::pair<int, int> range) {
  if (count <= 0) return false;
  const long last = static_cast<long>(first) + count - 1;
  return first <= range.second && last >= range.first;
}

}  // namespace rpcjob::runner
