#include "rpcjob/runtime/options.h"

#include <cstdlib>
#include <stdexcept>

#include "auth/handshake.h"
#include "memory_limit.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/pair_links.h"

namespace rpcjob::runtime {

void applyEnvironment(RuntimeOptions& options) {
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
