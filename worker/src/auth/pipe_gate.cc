#include "pipe_gate.h"

#include <tensorpipe/tensorpipe.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace rpcjob::auth {

// One pipe's handshake. Whoever finishes it first (its last step, a failure,
// the watchdog) wins `finished`; the others see it set and do nothing.
struct PipeGate::Attempt {
  std::shared_ptr<const std::string> secret;  // outlives the gate if callbacks do
  std::mutex mu;
  bool finished = false;
  std::shared_ptr<tensorpipe::Pipe> pipe;
  Admitted admitted;
  Refused refused;
  std::optional<ClientHandshake> client;
  std::optional<ServerHandshake> server;

  std::shared_ptr<tensorpipe::Pipe> livePipe() {
    std::lock_guard<std::mutex> lock(mu);
    return finished ? nullptr : pipe;
  }
  void fail(Failure reason, const std::string& detail) {
    std::shared_ptr<tensorpipe::Pipe> p;
    Refused r;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (finished) return;
      finished = true;
      p = std::move(pipe);
      r = std::move(refused);
      admitted = nullptr;
    }
    p->close();
    if (r) r(reason, detail);
  }
  void succeed() {
    Admitted a;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (finished) return;
      finished = true;
      pipe.reset();  // the runtime holds it from now on
      a = std::move(admitted);
      refused = nullptr;
    }
    a();
  }
};

// Fails the handshakes still running at their deadline: one thread per
// runtime, asleep while none is.
class PipeGate::Watchdog {
 public:
  Watchdog() : thread_([this] { run(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void watch(std::chrono::steady_clock::time_point deadline, std::weak_ptr<Attempt> attempt) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      deadlines_.emplace(deadline, std::move(attempt));
    }
    cv_.notify_all();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (deadlines_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto first = deadlines_.begin();
      if (std::chrono::steady_clock::now() < first->first) {
        cv_.wait_until(lock, first->first);
        continue;
      }
      std::weak_ptr<Attempt> weak = std::move(first->second);
      deadlines_.erase(first);
      lock.unlock();
      if (auto attempt = weak.lock()) {
        attempt->fail(Failure::kTimeout, "no complete handshake within the bound");
      }
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::multimap<std::chrono::steady_clock::time_point, std::weak_ptr<Attempt>> deadlines_;
  std::thread thread_;
};

PipeGate::PipeGate(std::string secret, std::string self, std::chrono::milliseconds bound)
    : secret_(std::move(secret)),
      self_(std::move(self)),
      bound_(bound),
      watchdog_(std::make_shared<Watchdog>()) {}

PipeGate::~PipeGate() = default;

std::shared_ptr<PipeGate::Attempt> PipeGate::begin(std::shared_ptr<tensorpipe::Pipe> pipe,
                                                   Admitted admitted, Refused refused,
                                                   bool watchNow) {
  auto attempt = std::make_shared<Attempt>();
  attempt->secret = std::make_shared<const std::string>(secret_);
  attempt->pipe = std::move(pipe);
  attempt->admitted = std::move(admitted);
  attempt->refused = std::move(refused);
  if (watchNow) watchdog_->watch(std::chrono::steady_clock::now() + bound_, attempt);
  return attempt;
}

void PipeGate::readStep(const std::shared_ptr<Attempt>& attempt,
                        std::function<void(const std::string& metadata)> next) {
  auto pipe = attempt->livePipe();
  if (!pipe) return;
  pipe->readDescriptor([attempt, next = std::move(next)](const tensorpipe::Error& error,
                                                         tensorpipe::Descriptor descriptor) {
    if (error) {
      attempt->fail(Failure::kClosed, error.what());
      return;
    }
    // Nothing is allocated for what a peer announces before it is admitted:
    // a handshake message is its metadata alone, and small.
    if (!descriptor.payloads.empty() || !descriptor.tensors.empty() ||
        descriptor.metadata.size() > kMaxMessageBytes) {
      const bool rpc = descriptor.metadata.size() >= 2 && descriptor.metadata[0] == 'R' &&
                       descriptor.metadata[1] == 'J';
      attempt->fail(rpc ? Failure::kUnauthenticated : Failure::kTooLarge,
                    "a message that is not a handshake message");
      return;
    }
    auto pipe = attempt->livePipe();
    if (!pipe) return;
    pipe->read(tensorpipe::Allocation{}, [attempt, next, metadata = std::move(descriptor.metadata)](
                                             const tensorpipe::Error& error) {
      if (error) {
        attempt->fail(Failure::kClosed, error.what());
        return;
      }
      next(metadata);
    });
  });
}

void PipeGate::writeStep(const std::shared_ptr<Attempt>& attempt, std::string metadata) {
  auto pipe = attempt->livePipe();
  if (!pipe) return;
  tensorpipe::Message message;
  message.metadata = std::move(metadata);
  pipe->write(std::move(message), [attempt](const tensorpipe::Error& error) {
    if (error) attempt->fail(Failure::kClosed, error.what());
  });
}

void PipeGate::admitServer(std::shared_ptr<tensorpipe::Pipe> pipe, Admitted admitted,
                           Refused refused) {
  const std::string peer = pipe->getRemoteName();
  auto attempt = begin(std::move(pipe), std::move(admitted), std::move(refused), true);
  attempt->server.emplace(*attempt->secret, self_);
  readStep(attempt, [attempt, peer](const std::string& hello) {
    Failure why = Failure::kMalformed;
    auto challenge = attempt->server->onHello(hello.data(), hello.size(), peer, why);
    if (!challenge) {
      attempt->fail(why, "a bad hello");
      return;
    }
    writeStep(attempt, std::move(*challenge));
    readStep(attempt, [attempt](const std::string& proof) {
      Failure why = Failure::kMalformed;
      if (!attempt->server->onProof(proof.data(), proof.size(), why)) {
        attempt->fail(why, why == Failure::kBadProof ? "its proof does not match this job's secret"
                                                     : "a bad proof message");
        return;
      }
      attempt->succeed();
    });
  });
}

void PipeGate::admitClient(std::shared_ptr<tensorpipe::Pipe> pipe, const std::string& server,
                           Admitted admitted, Refused refused) {
  // The bound starts once our hello is out, i.e. once TensorPipe connected: a
  // peer not listening yet, or a connection slow to establish on a loaded
  // machine, is the dialler's start-up timeout's business, not a stalled handshake.
  auto attempt = begin(std::move(pipe), std::move(admitted), std::move(refused), false);
  attempt->client.emplace(*attempt->secret, self_, server);
  if (auto live = attempt->livePipe()) {
    tensorpipe::Message hello;
    hello.metadata = attempt->client->hello();
    std::weak_ptr<Watchdog> watchdog = watchdog_;
    const auto bound = bound_;
    live->write(std::move(hello), [attempt, watchdog, bound](const tensorpipe::Error& error) {
      if (error) {
        attempt->fail(Failure::kClosed, error.what());
      } else if (auto w = watchdog.lock()) {
        w->watch(std::chrono::steady_clock::now() + bound, attempt);
      }
    });
  }
  readStep(attempt, [attempt](const std::string& challenge) {
    Failure why = Failure::kMalformed;
    auto proof = attempt->client->onChallenge(challenge.data(), challenge.size(), why);
    if (!proof) {
      attempt->fail(why, why == Failure::kBadProof ? "it did not prove it holds this job's secret"
                                                   : "a bad challenge message");
      return;
    }
    writeStep(attempt, std::move(*proof));
    attempt->succeed();
  });
}

}  // namespace rpcjob::auth
