#include "rpcjob/operator/errors.h"

#include "json_util.h"

namespace rpcjob::kube {

ApiError::ApiError(int code, std::string reason, std::string message)
    : std::runtime_error(std::to_string(code) + " " + reason + ": " + message),
      code_(code),
      reason_(std::move(reason)),
      message_(std::move(message)) {}

ApiError ApiError::fromResponse(int status, const std::string& body) {
  auto v = detail::parseJson(body);
  if (v && v->is_object() && detail::getString(*v, "kind") == "Status") {
    std::string reason = detail::getString(*v, "reason");
    if (reason.empty()) reason = "Status" + std::to_string(status);
    return ApiError(status, reason, detail::getString(*v, "message"));
  }
  std::string text = body.substr(0, 300);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return ApiError(status, "HTTP" + std::to_string(status), text);
}

}  // namespace rpcjob::kube
