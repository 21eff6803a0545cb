#pragma once

// A small HTTP server for /metrics, /healthz and /readyz.
//
// Why our own and not prometheus-cpp's Exposer: the Exposer (civetweb) failed
// to start in a program linked with PyTorch 2.11's libtorch ("null context when
// constructing CivetServer", see GPU.md), and the CUDA worker must export its
// metrics too. This server needs only POSIX sockets, so the same code serves
// the CPU worker, the CUDA worker and the operator. metrics/README.md has the
// details.
//
// Scope: HTTP/1.0 and 1.1, GET and HEAD, one request per connection
// (`Connection: close`), request head bounded (maxRequestBytes), each client
// bounded in time (clientTimeout) so a slow or silent client cannot hold the
// server, at most maxClients at once. One thread, poll(2).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/metric_family.h>

namespace rpcjob {
namespace metrics {

struct HttpServerOptions {
  std::string bindAddress = "0.0.0.0";  // IPv4 address to bind
  std::uint16_t port = 9400;            // 0: the kernel picks a free port; see port()
  std::size_t maxRequestBytes = 8192;   // request line + headers
  std::chrono::milliseconds clientTimeout{5000};
  std::size_t maxClients = 64;
};

// Thread safety: start() and stop() from one thread (the owner). The callbacks
// run on the server's thread, one at a time; they must be thread-safe with
// respect to the rest of the program (Metrics::collect() is).
class HttpServer {
 public:
  using CollectFn = std::function<std::vector<prometheus::MetricFamily>()>;
  // A health check: true is healthy. On false the server answers 503 and the
  // check's message (if any) as the body.
  using CheckFn = std::function<bool(std::string& message)>;

  HttpServer(HttpServerOptions options, CollectFn collect, CheckFn healthy = nullptr,
             CheckFn ready = nullptr);
  ~HttpServer();  // stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the thread. Throws std::system_error when the
  // address cannot be bound (e.g. the port is taken).
  void start();
  // Wakes the thread, closes every connection and joins. Idempotent.
  void stop();

  // The bound port (the picked one when options.port was 0). Valid after start().
  std::uint16_t port() const { return port_; }

  // The body for /metrics (Prometheus text format 0.0.4); exposed for tests.
  static std::string serialize(const std::vector<prometheus::MetricFamily>& families);

 private:
  struct Client;
  void run();
  void acceptClients();
  bool readFrom(Client& client);
  bool writeTo(Client& client);
  // The whole response (status line, headers, body) to one request head.
  std::string respond(const std::string& head);

  const HttpServerOptions options_;
  const CollectFn collect_;
  const CheckFn healthy_;
  const CheckFn ready_;
  int listenFd_ = -1;
  int wakeFds_[2] = {-1, -1};
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::vector<std::unique_ptr<Client>> clients_;
};

}  // namespace metrics
}  // namespace rpcjob
