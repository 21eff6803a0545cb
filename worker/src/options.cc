#include "rpcjob/runtime/options.h"

#include <cstdlib>
#include <stdexcept>

#include "memory_limit.h"

namespace rpcjob::runtime {

void applyEnvironment(RuntimeOptions& options) {
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
  if (const WorkerEntry* entry = assignment.byName(worker)) options.deviceMaps = entry->deviceMaps;
  return options;
}

}  // namespace rpcjob::runtime
