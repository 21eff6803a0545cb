#include "rpcjob/runtime/options.h"

#include <cstdlib>
#include <stdexcept>

namespace rpcjob::runtime {

void applyEnvironment(RuntimeOptions& options) {
  const char* text = std::getenv("RPCJOB_MAX_MESSAGE_BYTES");
  if (text == nullptr || *text == '\0') return;
  std::uint64_t value = 0;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9' || value > (UINT64_MAX - static_cast<unsigned>(*c - '0')) / 10) {
      value = 0;
      break;
    }
    value = value * 10 + static_cast<unsigned>(*c - '0');
  }
  if (value == 0) {
    throw std::invalid_argument(std::string("RPCJOB_MAX_MESSAGE_BYTES: not a positive number of "
                                            "bytes: '") +
                                text + "'");
  }
  options.maxMessageBytes = value;
}

RuntimeOptions optionsFromAssignment(const Assignment& assignment, const std::string& worker) {
  RuntimeOptions options;
  options.transports = assignment.transports;
  options.channels = assignment.channels;
  if (const WorkerEntry* entry = assignment.byName(worker)) options.deviceMaps = entry->deviceMaps;
  return options;
}

}  // namespace rpcjob::runtime
