#include "rpcjob/runtime/errors.h"

namespace rpcjob::runtime {

const char* toString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kRemoteException:
      return "remote exception";
    case ErrorCode::kUnknownFunction:
      return "unknown function";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kConnection:
      return "connection";
    case ErrorCode::kShutdown:
      return "shutdown";
    case ErrorCode::kBadMessage:
      return "bad message";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
  }
  return "unknown";
}

RpcError::RpcError(ErrorCode code, std::string worker, const std::string& message)
    : std::runtime_error(message), code_(code), worker_(std::move(worker)) {}

}  // namespace rpcjob::runtime
