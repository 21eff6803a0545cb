#pragma once
// RPC-level events, for metrics (calls, latency by function, in-flight, errors,
// pipe handshakes, channel choices) without the runtime depending on prometheus.
// Set one in RuntimeOptions::observer. When none is set the runtime reads no
// clocks for it and makes no virtual calls on the hot path.
//
// Thread safety: methods are called concurrently from TensorPipe's loop threads,
// the runtime's pool and callers' threads; they must be cheap and must not block
// or call back into the runtime.

#include <chrono>
#include <string>

namespace rpcjob::runtime {

enum class CallStatus { kOk, kRemoteError, kUnknownFunction, kTimeout, kConnection, kOther };

class Observer {
 public:
  virtual ~Observer() = default;
  // A call (rpcAsync/rpcSync/remote/toHere) leaves this worker for `peer`.
  virtual void callStarted(const std::string& function, const std::string& peer) = 0;
  virtual void callFinished(const std::string& function, const std::string& peer, CallStatus status,
                            std::chrono::nanoseconds duration) = 0;
  // A request from `peer` is served here.
  virtual void serverCallStarted(const std::string& function, const std::string& peer) = 0;
  virtual void serverCallFinished(const std::string& function, const std::string& peer,
                                  CallStatus status, std::chrono::nanoseconds duration) = 0;
  // Our pipe to `peer` completed its handshake (connect to HelloReply).
  virtual void pipeOpened(const std::string& peer, std::chrono::nanoseconds handshake) = 0;
  // TensorPipe's channel for (localDevice, remoteDevice) with `peer`, as the
  // runtime recomputes it from the handshake ("cpu:0", "cuda:1", ...).
  virtual void channelSelected(const std::string& peer, const std::string& localDevice,
                               const std::string& remoteDevice, const std::string& channel) = 0;
};

}  // namespace rpcjob::runtime
