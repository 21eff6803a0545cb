// A worker-like program for the Prometheus test: it serves /metrics with the
// decorators counting real TensorPipe transfers.
//
//   metrics_fixture serve --name worker0 --job J --channels basic,cma --ready-file F
//       listens (uv), receives messages on every accepted pipe; writes
//       "<metrics port> <pipe url>" to F once serving.
//   metrics_fixture send --name worker1 --job J --peer worker0 --to URL
//       --channels basic,cma --messages N --sizes 1000,20000 --ready-file F
//       opens one pipe per channel (a context with only that channel), sends N
//       messages of tensors of those sizes on each, then writes "<port> done".
// Both run until stdin closes (the test holds it open), then exit 0.
//
// The runtime is not there yet, so the RPC-level metrics are fed by this program
// through RpcMetrics (one "echo" call per message, a handshake per pipe, the
// channel of each pipe): the same calls the runtime's observer adapter will make.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pipe_pair.h"
#include "rpcjob/metrics/http_server.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/rpc_metrics.h"

namespace {

using namespace rpcjob;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

void writeReady(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << content << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: metrics_fixture serve|send --name N ...\n";
    return 2;
  }
  const std::string mode = argv[1];
  std::map<std::string, std::string> args;
  for (int i = 2; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  const std::string name = args["--name"];

  metrics::MetricsOptions options;
  options.constantLabels = {{"rpcjob_job", args["--job"]}, {"worker", name}};
  metrics::Metrics m(options);
  m.rpc().setWorkerInfo({name, mode == "serve" ? 0 : 1, args["--job"], "localhost"});
  metrics::HttpServerOptions serverOptions;
  serverOptions.bindAddress = "127.0.0.1";
  serverOptions.port = 0;
  metrics::HttpServer server(serverOptions, [&m] { return m.collect(); });
  server.start();
  const std::string port = std::to_string(server.port());

  std::vector<std::unique_ptr<testing::Endpoint>> endpoints;
  std::vector<std::thread> receivers;
  std::atomic<bool> stopping{false};
  try {
    if (mode == "serve") {
      endpoints.push_back(std::make_unique<testing::Endpoint>(
          testing::EndpointOptions{name, split(args["--channels"]), "uv", &m.channels()}));
      const std::string url = endpoints[0]->listen();
      receivers.emplace_back([&] {
        // Accept one pipe per channel, then receive on each until it closes.
        std::vector<std::thread> perPipe;
        for (size_t i = 0; i < split(args["--channels"]).size(); ++i) {
          auto pipe = endpoints[0]->accepted();
          m.rpc().pipeOpened(pipe->getRemoteName(), 0.001);
          perPipe.emplace_back([&m, pipe] {
            try {
              for (;;) {
                const auto start = std::chrono::steady_clock::now();
                testing::receiveTensors(*pipe);
                m.rpc().serverCallStarted("echo", pipe->getRemoteName());
                m.rpc().serverCallFinished("echo", pipe->getRemoteName(), "ok",
                                           secondsSince(start));
              }
            } catch (const std::exception&) {
              // The pipe closed: the sender is done or the test is over.
            }
          });
        }
        for (auto& t : perPipe) t.join();
      });
      writeReady(args["--ready-file"], port + " " + url);
    } else if (mode == "send") {
      const int messages = std::stoi(args["--messages"]);
      std::vector<testing::Bytes> tensors;
      for (const auto& size : split(args["--sizes"])) {
        tensors.push_back(testing::pattern(std::stoul(size), 7));
      }
      for (const auto& channel : split(args["--channels"])) {
        endpoints.push_back(std::make_unique<testing::Endpoint>(
            testing::EndpointOptions{name, {channel}, "uv", &m.channels()}));
        const auto start = std::chrono::steady_clock::now();
        auto pipe = endpoints.back()->connect(args["--to"], args["--peer"]);
        for (int i = 0; i < messages; ++i) {
          const auto callStart = std::chrono::steady_clock::now();
          m.rpc().callStarted("echo", args["--peer"]);
          testing::sendTensors(*pipe, tensors);
          m.rpc().callFinished("echo", args["--peer"], "ok", secondsSince(callStart));
          if (i == 0) {
            m.rpc().pipeOpened(args["--peer"], secondsSince(start));
            // The runtime has one pipe per peer, so one selection per device
            // pair; here each channel has a pipe of its own: report the first.
            if (channel == split(args["--channels"]).front()) {
              m.rpc().channelSelected(args["--peer"], "cpu", "cpu", channel);
            }
          }
        }
      }
      writeReady(args["--ready-file"], port + " done");
    } else {
      std::cerr << "unknown mode " << mode << "\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "metrics_fixture " << mode << ": " << e.what() << "\n";
    return 1;
  }
  // Serve until the test closes stdin.
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  stopping = true;
  endpoints.clear();  // closes pipes: the receivers see errors and finish
  for (auto& t : receivers) t.join();
  server.stop();
  return 0;
}
