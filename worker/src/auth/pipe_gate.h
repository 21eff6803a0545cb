#pragma once
// Runs the handshake of handshake.h on fresh TensorPipe pipes: a pipe is handed
// to the runtime (`admitted`) only once both sides proved they hold the job's
// secret. Until then only handshake-sized messages without payloads or tensors
// are read (nothing else is allocated or dispatched). A pipe whose handshake
// fails, or is not over within the bound, is closed and `refused` is told why.
// The bound runs from accept on the accepting side, and from when the hello
// went out (TensorPipe connected) on the dialling side.

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "handshake.h"

namespace tensorpipe {
class Pipe;
}

namespace rpcjob::auth {

class PipeGate {
 public:
  using Admitted = std::function<void()>;
  // Runs once the pipe is closed; `detail` is for the log (never the secret).
  using Refused = std::function<void(Failure reason, const std::string& detail)>;

  PipeGate(std::string secret, std::string self, std::chrono::milliseconds bound);
  ~PipeGate();  // stops the watchdog; a handshake still running then fails when its pipe closes
  PipeGate(const PipeGate&) = delete;
  PipeGate& operator=(const PipeGate&) = delete;

  // A pipe we accepted: the peer must prove itself first.
  void admitServer(std::shared_ptr<tensorpipe::Pipe> pipe, Admitted admitted, Refused refused);
  // A pipe we dialled to `server`: it proves itself, then we do.
  void admitClient(std::shared_ptr<tensorpipe::Pipe> pipe, const std::string& server,
                   Admitted admitted, Refused refused);

 private:
  struct Attempt;
  class Watchdog;
  // `watchNow`: the bound starts now (else the caller starts it).
  std::shared_ptr<Attempt> begin(std::shared_ptr<tensorpipe::Pipe> pipe, Admitted admitted,
                                 Refused refused, bool watchNow);
  static void readStep(const std::shared_ptr<Attempt>& attempt,
                       std::function<void(const std::string& metadata)> next);
  static void writeStep(const std::shared_ptr<Attempt>& attempt, std::string metadata);

  const std::string secret_;
  const std::string self_;
  const std::chrono::milliseconds bound_;
  std::shared_ptr<Watchdog> watchdog_;
};

}  // namespace rpcjob::auth
