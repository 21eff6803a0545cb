#pragma once
// Two processes and one TensorPipe pipe between them, with TensorPipe's public
// API only (tensorpipe/tensorpipe.h): no rpcjob runtime code, no libtorch. The
// floor benchmark (tensorpipe_floor.cc) measures through it what TensorPipe
// alone costs; rpcjob's runtime pays that plus its own work.
//
// Both processes register what rpcjob's runtime registers for two workers on
// one host (worker/src/tensorpipe_registry.cc): the shm transport above uv
// (ibv is not viable between two local processes), and the given channels,
// earlier ones first. The server listens on shm:// and uv://127.0.0.1 as the
// runtime's listener does; the client connects over uv and TensorPipe moves the
// pipe to shm, the best transport both offer.

#include <sys/types.h>

#include <tensorpipe/tensorpipe.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rpcjob::tpfloor {

// What a context registered.
struct Registered {
  std::string transport;              // the best one: "shm", or "uv" where shm is not viable
  std::vector<std::string> channels;  // those of the asked ones that are viable here
};

// A context with the transports above and those of `channels` ("cma",
// "basic") that are viable here.
std::shared_ptr<tensorpipe::Context> makeContext(const std::string& name,
                                                 const std::vector<std::string>& channels,
                                                 Registered& registered);

// Fault injection for the benchmark's own test: which echo the server spoils
// (one byte flipped), so that the client's check of every echo must fail.
struct Corruption {
  long message = 0;     // the n-th message echoed (1-based; 0: none)...
  bool tensor = false;  // ...or the first one that carries a tensor
};

// The server's role (the process the client spawns): listens, prints its uv
// URL on stdout, then echoes every message of the one pipe it accepts back from
// inside its read callback, on TensorPipe's own threads, until the client
// closes the pipe. Returns the exit code.
int serve(const std::vector<std::string>& channels, Corruption corruption);

// Waits for a condition that TensorPipe's threads make true: a short spin of
// yields first, then a condition variable (the way rpcjob's Future::wait waits,
// so that the hand-off costs the same on both sides of the comparison).
// notify() touches the mutex only while someone sleeps on it, which is sound
// only if the state done() reads is changed with sequentially consistent
// atomics (the default memory order) before notify().
class Signal {
 public:
  // False when `done` did not hold within `seconds`.
  bool wait(const std::function<bool()>& done, double seconds);
  // After the state `done` reads has changed.
  void notify();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

// The client's end: the server process and the pipe to it. Every message
// that arrives goes to the handler set with onResponse(), on TensorPipe's
// thread; the next read is armed after the handler returns (as the runtime's
// read loop does). Set the handler and the receive buffer while nothing is in
// flight.
class EchoLink {
 public:
  // Spawns `self` (this program) with the server's role (the arguments
  // `serverArgs`) and connects to it. Throws std::runtime_error when the
  // server does not start.
  EchoLink(const std::string& self, const std::vector<std::string>& channels,
           const std::vector<std::string>& serverArgs);
  ~EchoLink();
  EchoLink(const EchoLink&) = delete;
  EchoLink& operator=(const EchoLink&) = delete;

  // What this end registered (the server registers the same).
  const Registered& registered() const { return registered_; }

  // metadata: the echoed message's metadata; its tensor (if any) is in the
  // receive buffer. Replacing the handler waits for a running one to return.
  using Handler = std::function<void(std::string metadata)>;
  void onResponse(Handler handler);
  // Where an echoed tensor is read into (its length must match).
  void receiveInto(char* buffer, size_t length);

  // Writes a message: `metadata`, and `tensor` (length bytes) when not null.
  // Callable from the handler. `tensor` must outlive the write.
  void write(std::string metadata, const char* tensor = nullptr, size_t length = 0);

  // The first TensorPipe error or protocol failure seen, empty if none.
  std::string error();
  bool failed() const { return failed_.load(); }
  // Records the failure (the first one sticks) and wakes signal()'s waiters.
  void fail(const std::string& why);
  // What measurements wait on; notified by every fail().
  Signal& signal() { return signal_; }

  // Closes the pipe and the context and waits for the server to exit; returns
  // an error string (empty when the server exited 0).
  std::string close();

 private:
  void readNext();

  pid_t server_ = -1;
  Registered registered_;
  std::shared_ptr<tensorpipe::Context> context_;
  std::shared_ptr<tensorpipe::Pipe> pipe_;
  std::mutex handlerMu_;  // handler_ and the receive buffer
  Handler handler_;
  char* receive_ = nullptr;
  size_t receiveLength_ = 0;
  Signal signal_;
  std::mutex mu_;
  std::string error_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> closing_{false};  // errors from here on are the close's own
  bool closed_ = false;
  std::string closeError_;
};

}  // namespace rpcjob::tpfloor
