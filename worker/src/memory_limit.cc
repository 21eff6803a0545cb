#include "memory_limit.h"

#include "cgroup_files.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace rpcjob::runtime {

std::optional<std::uint64_t> parseByteCount(const std::string& text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::optional<std::uint64_t> parseCgroupMemoryLimit(const std::string& contents) {
  std::string text = contents;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  const auto value = parseByteCount(text);  // nullopt for "max" (v2: no limit)
  // cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit value.
  if (!value || *value >= (std::uint64_t{1} << 62)) return std::nullopt;
  return value;
}

std::uint64_t memoryLimitBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageSize = sysconf(_SC_PAGE_SIZE);
  std::uint64_t limit = pages > 0 && pageSize > 0 ? static_cast<std::uint64_t>(pages) *
                                                        static_cast<std::uint64_t>(pageSize)
                                                  : UINT64_MAX;
  // The smallest limit found: our own group's (cgroup v2, and v1's memory
  // controller) and the one at each mount point (a container's own group).
  // Limits of enclosing groups are not read.
  const std::string groups = readWholeFile("/proc/self/cgroup");
  const std::string v2 = ownCgroup(groups, "");
  const std::string v1 = ownCgroup(groups, "memory");
  for (const std::string& path :
       {v2.empty() ? std::string() : "/sys/fs/cgroup" + v2 + "/memory.max",
        std::string("/sys/fs/cgroup/memory.max"),
        v1.empty() ? std::string() : "/sys/fs/cgroup/memory" + v1 + "/memory.limit_in_bytes",
        std::string("/sys/fs/cgroup/memory/memory.limit_in_bytes")}) {
    if (path.empty()) continue;
    if (auto group = parseCgroupMemoryLimit(readWholeFile(path))) limit = std::min(limit, *group);
  }
  return limit;
}

}  // namespace rpcjob::runtime
