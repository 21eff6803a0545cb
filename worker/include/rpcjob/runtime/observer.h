#pragma once
// RPC-level events, for metrics (calls, latency by function, in-flight, errors,
// pipe handshakes, channel choices) without the runtime depending on prometheus.
// Set one in RuntimeOptions::observer. When none is set the runtime makes no
// virtual calls on the hot path and reads no clock for it.
//
// Thread safety: methods are called concurrently from TensorPipe's loop threads,
// the runtime's pool and callers' threads; they must be cheap and must not block
// or call back into the runtime.

#include <chrono>
#include <cstdint>
#include <string>

namespace rpcjob::runtime {

enum class CallStatus { kOk, kRemoteError, kUnknownFunction, kTimeout, kConnection, kOther };

// The steady clock, read through the CPU's time-stamp counter where that is
// invariant (event_clock.cc): clock_gettime costs 20-80 ns in a VM, and a
// served call's two reads were most of the metrics' cost on a server's lane
// poller. Within tens of nanoseconds of std::chrono::steady_clock::now() (half
// a microsecond at worst), which it reads itself every 50 us per thread, and
// where there is no such counter.
std::chrono::steady_clock::time_point readEventClock() noexcept;

// The time of an event, on the steady clock, read when first asked for -- or
// known already. The runtime hands an observer the times it has anyway: a
// call's start, read for its deadline, and the arrival of an incoming message,
// read at most once however many calls it carries (a batch of responses or
// requests). An observer that records nothing (or is paused) never asks, and
// no clock is read for it.
//
// Not thread-safe: valid only during the observer call it is passed to, on
// that call's thread.
class EventTime {
 public:
  using Clock = std::chrono::steady_clock;
  EventTime() = default;
  explicit EventTime(Clock::time_point known) : time_(known), known_(true) {}
  EventTime(const EventTime&) = delete;
  EventTime& operator=(const EventTime&) = delete;

  Clock::time_point get() const {
    if (!known_) {
      time_ = readEventClock();
      known_ = true;
    }
    return time_;
  }

 private:
  mutable Clock::time_point time_{};
  mutable bool known_ = false;
};

class Observer {
 public:
  // What callStarted/serverCallStarted return. The runtime keeps it with the
  // call and hands it back unchanged to the matching *Finished, exactly once.
  // The observer carries what it needs from start to finish in it -- typically
  // the function's metric handles and the start time -- so nothing is looked
  // up twice.
  struct CallToken {
    const void* handle = nullptr;
    std::uint64_t start = 0;
  };

  virtual ~Observer() = default;
  // A call (rpcAsync/rpcSync/remote/toHere) leaves this worker for `peer` at
  // `now`.
  virtual CallToken callStarted(const std::string& function, const std::string& peer,
                                const EventTime& now) = 0;
  // Its response arrived at `now` (the arrival of the message carrying it), or
  // it failed or timed out then.
  virtual void callFinished(const std::string& function, const std::string& peer, CallStatus status,
                            CallToken token, const EventTime& now) = 0;
  // A request from `peer`, which arrived at `arrived`, is served here.
  virtual CallToken serverCallStarted(const std::string& function, const std::string& peer,
                                      const EventTime& arrived) = 0;
  // Its response (or error) was written at `now` (or its write failed then:
  // the caller went away). Recorded after the write, not before it: the
  // observer's work stays off the response's way to the caller.
  virtual void serverCallFinished(const std::string& function, const std::string& peer,
                                  CallStatus status, CallToken token, const EventTime& now) = 0;
  // Our pipe to `peer` completed its handshake (connect to HelloReply).
  virtual void pipeOpened(const std::string& peer, std::chrono::nanoseconds handshake) = 0;
  // TensorPipe's channel for (localDevice, remoteDevice) with `peer`, as the
  // runtime recomputes it from the handshake ("cpu:0", "cuda:1", ...).
  virtual void channelSelected(const std::string& peer, const std::string& localDevice,
                               const std::string& remoteDevice, const std::string& channel) = 0;
  // A pipe was closed because its authentication handshake failed: `reason` is
  // one of bad_proof, unauthenticated, malformed, too_large, timeout, closed
  // (the peer's name is left out: anyone can claim any).
  virtual void handshakeFailed(const char* reason) { (void)reason; }
};

}  // namespace rpcjob::runtime
