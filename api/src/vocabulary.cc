#include "rpcjob/api/vocabulary.h"

#include <algorithm>

#include "rpcjob/api/schema.h"

namespace rpcjob::api {

// The lists live in the schema tables (schema.cc), once.
const std::vector<std::string>& knownTransports() {
  return enumFields().at("spec.transports[]");
}

const std::vector<std::string>& knownChannels() {
  return enumFields().at("spec.channels[]");
}

bool isKnownTransport(const std::string& name) {
  const auto& all = knownTransports();
  return std::find(all.begin(), all.end(), name) != all.end();
}

bool isKnownChannel(const std::string& name) {
  const auto& all = knownChannels();
  return std::find(all.begin(), all.end(), name) != all.end();
}

bool isCudaChannel(const std::string& name) {
  return name.rfind("cuda_", 0) == 0;
}

}  // namespace rpcjob::api
