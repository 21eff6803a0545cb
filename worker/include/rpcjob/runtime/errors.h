#pragma once
// The one exception type the runtime reports failures with. A failed future holds
// one; value() and rpcSync() throw it.

#include <stdexcept>
#include <string>

namespace rpcjob::runtime {

enum class ErrorCode {
  kRemoteException,  // the remote function threw; message has the worker and its message
  kUnknownFunction,  // the callee has no function of that name
  kTimeout,          // no answer within the call's timeout
  kConnection,       // the peer could not be reached or went away mid-call
  kShutdown,         // the runtime (ours or the peer's) is shutting down
  kBadMessage,       // a peer sent something undecodable, or a value cannot be sent
  kInvalidArgument,  // the caller's mistake (unknown worker, ...)
};

const char* toString(ErrorCode code);

class RpcError : public std::runtime_error {
 public:
  RpcError(ErrorCode code, std::string worker, const std::string& message);
  ErrorCode code() const { return code_; }
  // The worker the failure happened on or was talking to.
  const std::string& worker() const { return worker_; }

 private:
  ErrorCode code_;
  std::string worker_;
};

}  // namespace rpcjob::runtime
