#pragma once
// Errors of API calls, carrying what the server said (a metav1.Status) or why
// there was no answer.

#include <stdexcept>
#include <string>

namespace rpcjob::kube {

class ApiError : public std::runtime_error {
 public:
  // code: the HTTP status (404, 409, 410, 403, ...), or 0 when the server did not
  // answer (reason "Transport" or "Timeout") or sent something unreadable
  // (reason "BadResponse").
  ApiError(int code, std::string reason, std::string message);

  int code() const { return code_; }
  const std::string& reason() const { return reason_; }
  const std::string& message() const { return message_; }

  bool notFound() const { return code_ == 404; }
  bool conflict() const { return code_ == 409; }  // stale resourceVersion or AlreadyExists
  bool alreadyExists() const { return code_ == 409 && reason_ == "AlreadyExists"; }
  bool gone() const { return code_ == 410; }  // resourceVersion too old: relist
  bool forbidden() const { return code_ == 403; }
  bool unauthorized() const { return code_ == 401; }
  bool transport() const { return code_ == 0; }
  // Worth retrying as is: no answer, throttled, or a server-side failure.
  bool retryable() const { return code_ == 0 || code_ == 429 || code_ >= 500; }

  // From a non-2xx response: reads the Status body when there is one.
  static ApiError fromResponse(int status, const std::string& body);

 private:
  int code_;
  std::string reason_;
  std::string message_;
};

}  // namespace rpcjob::kube
