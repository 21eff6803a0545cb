#pragma once
// RPC-level events, for metrics (calls, latency by function, in-flight, errors,
// pipe handshakes, channel choices) without the runtime depending on prometheus.
// Set one in RuntimeOptions::observer. When none is set the runtime makes no
// virtual calls on the hot path; it never reads a clock for the observer.
//
// Thread safety: methods are called concurrently from TensorPipe's loop threads,
// the runtime's pool and callers' threads; they must be cheap and must not block
// or call back into the runtime.

#include <chrono>
#include <cstdint>
#include <string>

namespace rpcjob::runtime {

enum class CallStatus { kOk, kRemoteError, kUnknownFunction, kTimeout, kConnection, kOther };

class Observer {
 public:
  // What callStarted/serverCallStarted return. The runtime keeps it with the
  // call and hands it back unchanged to the matching *Finished, exactly once.
  // The observer carries what it needs from start to finish in it -- typically
  // the function's metric handles and a start time from its own clock -- so
  // the runtime reads no clock for it and nothing is looked up twice.
  struct CallToken {
    const void* handle = nullptr;
    std::uint64_t start = 0;
  };

  virtual ~Observer() = default;
  // A call (rpcAsync/rpcSync/remote/toHere) leaves this worker for `peer`.
  virtual CallToken callStarted(const std::string& function, const std::string& peer) = 0;
  virtual void callFinished(const std::string& function, const std::string& peer, CallStatus status,
                            CallToken token) = 0;
  // A request from `peer` is served here.
  virtual CallToken serverCallStarted(const std::string& function, const std::string& peer) = 0;
  virtual void serverCallFinished(const std::string& function, const std::string& peer,
                                  CallStatus status, CallToken token) = 0;
  // Our pipe to `peer` completed its handshake (connect to HelloReply).
  virtual void pipeOpened(const std::string& peer, std::chrono::nanoseconds handshake) = 0;
  // TensorPipe's channel for (localDevice, remoteDevice) with `peer`, as the
  // runtime recomputes it from the handshake ("cpu:0", "cuda:1", ...).
  virtual void channelSelected(const std::string& peer, const std::string& localDevice,
                               const std::string& remoteDevice, const std::string& channel) = 0;
};

}  // namespace rpcjob::runtime
