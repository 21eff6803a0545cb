#pragma once

// Test helpers: real TensorPipe contexts, pipes and messages, with or without
// the rpcjob decorators. Used by the decorator tests, the exporter fixture that
// Prometheus scrapes, and the overhead benchmark.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tensorpipe/tensorpipe.h>

namespace rpcjob {
namespace metrics {
class ChannelMetrics;
}

namespace testing {

using Bytes = std::vector<std::uint8_t>;

struct EndpointOptions {
  std::string name;                   // the context's name (the worker name)
  std::vector<std::string> channels;  // "basic", "cma", "xth", in descending priority
  std::string transport = "uv";
  metrics::ChannelMetrics* metrics = nullptr;  // null: no decorators
  bool instrumentTransport = true;             // with metrics: wrap the transport too
};

// A tensorpipe::Context with the given transport and channels registered
// (wrapped in the decorators when options.metrics is set).
class Endpoint {
 public:
  explicit Endpoint(EndpointOptions options);
  ~Endpoint();  // closes and joins the context

  // Starts listening on loopback; accepted pipes queue up for accepted().
  std::string listen();
  std::shared_ptr<tensorpipe::Pipe> accepted();
  std::shared_ptr<tensorpipe::Pipe> connect(const std::string& url, const std::string& remoteName);

  tensorpipe::Context& context() { return *context_; }

 private:
  struct State;
  void armAccept();
  std::shared_ptr<State> state_;
  std::shared_ptr<tensorpipe::Context> context_;
  std::string transport_;
  std::shared_ptr<tensorpipe::Listener> listener_;
};

// Writes one message whose tensors are `tensors` (CPU) and waits for it.
// Throws std::runtime_error on a TensorPipe error.
void sendTensors(tensorpipe::Pipe& pipe, const std::vector<Bytes>& tensors);
// Reads one message and returns its tensors. Throws on error.
std::vector<Bytes> receiveTensors(tensorpipe::Pipe& pipe);

// Deterministic contents for a tensor of `size` bytes (seeded by `seed`).
Bytes pattern(std::size_t size, std::uint8_t seed);

// Round trips of a message of one `size`-byte tensor: the client writes, the
// server echoes it back, chained on TensorPipe's threads (no hand-off). Returns
// the mean round trip in microseconds.
double pingPong(tensorpipe::Pipe& client, tensorpipe::Pipe& server, std::size_t size,
                int iterations);

}  // namespace testing
}  // namespace rpcjob
