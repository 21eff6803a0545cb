#pragma once
// How much memory this process may use: the machine's, or its control group's
// limit where that is lower (a pod's memory limit on Kubernetes). The default
// for RuntimeOptions::maxMessageBytes: an incoming message larger than this
// could not be received anyway, and refusing it before allocating keeps a
// hostile or broken peer from getting the worker killed for memory.

#include <cstdint>
#include <optional>
#include <string>

namespace rpcjob::runtime {

// A byte count written in decimal digits only (no sign, space or unit); nullopt
// for anything else or a value past 2^64 - 1.
std::optional<std::uint64_t> parseByteCount(const std::string& text);

// The limit in a cgroup file's contents: v2 memory.max ("max" or bytes) or v1
// memory.limit_in_bytes (bytes; an unlimited group reads as nearly 2^63).
// nullopt when there is no limit or the text is not a number.
std::optional<std::uint64_t> parseCgroupMemoryLimit(const std::string& contents);

// min(physical memory, this process's cgroup limits: its own group's and the
// mount point's, cgroup v2 and v1's memory controller).
std::uint64_t memoryLimitBytes();

}  // namespace rpcjob::runtime
