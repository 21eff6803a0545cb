#include "rpcjob/api/errors.h"

namespace rpcjob::api {

std::string FieldError::toString() const {
  std::string out = path.empty() ? "(document)" : path;
  if (line > 0) out += " (line " + std::to_string(line) + ")";
  return out + ": " + message;
}

std::string formatErrors(const std::vector<FieldError>& errors) {
  std::string out;
  for (const auto& e : errors) out += e.toString() + "\n";
  return out;
}

}  // namespace rpcjob::api
