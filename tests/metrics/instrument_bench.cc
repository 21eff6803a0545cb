// Overhead of the decorators on small messages through real TensorPipe pipes.
//
// For each transport (shm, uv) with the basic channel: round trips of a message
// with one 8-byte tensor, chained on TensorPipe's threads (no hand-off), with no
// decorators, with channel decorators only, and with channel and transport
// decorators, on both sides. Rounds alternate between the two
// set-ups and the best round of each is kept, so that the 2-core CI machine's
// noise does not land on one side. Target: overhead < 3 %.
//
//   instrument_bench [iterations per round] [rounds]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "pipe_pair.h"
#include "rpcjob/metrics/metrics.h"

namespace {

using namespace rpcjob;

struct Setup {
  std::unique_ptr<metrics::Metrics> serverMetrics;
  std::unique_ptr<metrics::Metrics> clientMetrics;
  std::unique_ptr<testing::Endpoint> server;
  std::unique_ptr<testing::Endpoint> client;
  std::shared_ptr<tensorpipe::Pipe> clientPipe;
  std::shared_ptr<tensorpipe::Pipe> serverPipe;

  // instrumented: 0 none, 1 channels only, 2 channels and transports.
  Setup(const std::string& transport, int instrumented) {
    if (instrumented) {
      serverMetrics = std::make_unique<metrics::Metrics>();
      clientMetrics = std::make_unique<metrics::Metrics>();
    }
    server = std::make_unique<testing::Endpoint>(
        testing::EndpointOptions{"server",
                                 {"basic"},
                                 transport,
                                 instrumented ? &serverMetrics->channels() : nullptr,
                                 instrumented == 2});
    client = std::make_unique<testing::Endpoint>(
        testing::EndpointOptions{"client",
                                 {"basic"},
                                 transport,
                                 instrumented ? &clientMetrics->channels() : nullptr,
                                 instrumented == 2});
    clientPipe = client->connect(server->listen(), "server");
    serverPipe = server->accepted();
    testing::pingPong(*clientPipe, *serverPipe, 8, 200);  // warm up: handshake, caches
  }
  ~Setup() {
    clientPipe->close();
    serverPipe->close();
    client.reset();
    server.reset();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  std::printf(
      "rpcjob instrument overhead: 8-byte tensor round trips, basic channel, "
      "%d x %d per set-up (best round)\n",
      rounds, iterations);
  std::printf("%-9s %12s %12s %12s %12s %12s %12s\n", "transport", "plain us", "chan us",
              "chan+tr us", "chan+tr rt/s", "chan ovh", "chan+tr ovh");
  bool ok = true;
  for (const std::string transport : {"shm", "uv"}) {
    Setup setups[3] = {{transport, 0}, {transport, 1}, {transport, 2}};
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; ++r) {
      for (int i = 0; i < 3; ++i) {
        best[i] = std::min(best[i], testing::pingPong(*setups[i].clientPipe, *setups[i].serverPipe,
                                                      8, iterations));
      }
    }
    const double channelOverhead = (best[1] / best[0] - 1.0) * 100.0;
    const double fullOverhead = (best[2] / best[0] - 1.0) * 100.0;
    std::printf("%-9s %12.2f %12.2f %12.2f %12.0f %11.2f%% %11.2f%%\n", transport.c_str(), best[0],
                best[1], best[2], 1e6 / best[2], channelOverhead, fullOverhead);
    ok = ok && fullOverhead < 3.0;
  }
  std::printf("target: overhead < 3%%: %s\n", ok ? "met" : "NOT met");
  return 0;
}
