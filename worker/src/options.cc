#include "rpcjob/runtime/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "auth/handshake.h"
#include "memory_limit.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/pair_links.h"
#include "startup/start_plan.h"

namespace rpcjob::runtime {

namespace {

// The positive integer in `name`'s value, if set; throws for anything else.
std::optional<long long> positiveFromEnvironment(const char* name, const char* what) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value <= 0 || errno == ERANGE) {
    throw std::invalid_argument(std::string(name) + ": not a positive " + what + ": '" + text +
                                "'");
  }
  return value;
}

// "0" or "1" in `name`'s value, if set; throws for anything else.
std::optional<bool> switchFromEnvironment(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string v = text;
  if (v != "0" && v != "1") {
    throw std::invalid_argument(std::string(name) + ": '" + v + "' is neither 0 nor 1");
  }
  return v == "1";
}

void applyStartEnvironment(RuntimeOptions& options) {
  const char* mode = std::getenv(startup::kEnvStartPipes);
  if (mode != nullptr && *mode != '\0') {
    const std::optional<StartPipes> parsed = startup::parseStartPipes(mode);
    if (!parsed) {
      throw std::invalid_argument(std::string(startup::kEnvStartPipes) + ": '" + mode +
                                  "' is none of auto, full-mesh, leader, lazy");
    }
    options.startPipes = *parsed;
  }
  if (auto n = positiveFromEnvironment(startup::kEnvFullMeshMaxWorkers, "number of workers")) {
    options.fullMeshMaxWorkers = static_cast<int>(std::min<long long>(*n, 1 << 30));
  }
  if (auto ms = positiveFromEnvironment(startup::kEnvStartTimeoutMs, "number of milliseconds")) {
    options.startTimeout = std::chrono::milliseconds(*ms);
  }
}

}  // namespace

void applyEnvironment(RuntimeOptions& options) {
  applyStartEnvironment(options);
  if (auto on = switchFromEnvironment("RPCJOB_LANE")) options.sharedMemoryLane = *on;
  if (auto on = switchFromEnvironment("RPCJOB_SHARED_HOST_ALLOCATOR")) {
    options.sharedHostAllocator = *on;
  }
  const char* secretFile = std::getenv(kEnvSecretFile);
  if (secretFile != nullptr && *secretFile != '\0') {
    options.secret = auth::readSecretFile(secretFile);
  }
  const char* timeout = std::getenv(kEnvHandshakeTimeoutMs);
  if (timeout != nullptr && *timeout != '\0') {
    char* end = nullptr;
    const long long ms = std::strtoll(timeout, &end, 10);
    if (*end != '\0' || ms <= 0) {
      throw std::invalid_argument(std::string(kEnvHandshakeTimeoutMs) +
                                  ": not a positive number of milliseconds: '" + timeout + "'");
    }
    options.handshakeTimeout = std::chrono::milliseconds(ms);
  }
  const char* text = std::getenv("RPCJOB_MAX_MESSAGE_BYTES");
  if (text == nullptr || *text == '\0') return;
  const std::optional<std::uint64_t> value = parseByteCount(text);
  if (!value || *value == 0) {
    throw std::invalid_argument(std::string("RPCJOB_MAX_MESSAGE_BYTES: not a positive number of "
                                            "bytes: '") +
                                text + "'");
  }
  options.maxMessageBytes = *value;
}

RuntimeOptions optionsFromAssignment(const Assignment& assignment, const std::string& worker) {
  RuntimeOptions options;
  options.transports = assignment.transports;
  options.channels = assignment.channels;
  // Derived from the compact table (pair_links.h), as the planner showed them.
  if (assignment.byName(worker) != nullptr) options.deviceMaps = deviceMapsOf(assignment, worker);
  return options;
}

}  // namespace rpcjob::runtime
