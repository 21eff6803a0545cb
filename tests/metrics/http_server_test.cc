// The /metrics server over real sockets: routes, status codes, bounds, a slow
// client, stop.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <system_error>
#include <thread>

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "rpcjob/metrics/http_server.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/rpc_metrics.h"

namespace rpcjob {
namespace metrics {
namespace {

int connectTo(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` raw and returns the whole response (the server closes).
std::string roundTrip(std::uint16_t port, const std::string& request) {
  int fd = connectTo(port);
  EXPECT_GE(fd, 0);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    response.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return response;
}

std::string get(std::uint16_t port, const std::string& path) {
  return roundTrip(port, "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
}

struct ServerTest : ::testing::Test {
  Metrics metrics;
  bool healthy = true;
  bool ready = false;
  HttpServerOptions options() {
    HttpServerOptions o;
    o.bindAddress = "127.0.0.1";
    o.port = 0;
    o.clientTimeout = std::chrono::milliseconds(300);
    return o;
  }
  HttpServer server{options(), [this] { return metrics.collect(); },
                    [this](std::string&) { return healthy; },
                    [this](std::string& message) {
                      message = ready ? "" : "runtime not initialised";
                      return ready;
                    }};
  void SetUp() override { server.start(); }
};

TEST_F(ServerTest, ServesMetrics) {
  metrics.rpc().callStarted("echo", "peer");
  metrics.rpc().callFinished("echo", "peer", status::kOk, 0.001);
  const std::string response = get(server.port(), "/metrics?x=1");
  EXPECT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response;
  EXPECT_NE(response.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(
      response.find("rpcjob_rpc_calls_total{function=\"echo\",side=\"client\",status=\"ok\"} 1"),
      std::string::npos)
      << response;
  EXPECT_NE(response.find("rpcjob_rpc_duration_seconds_bucket"), std::string::npos);
  // Content-Length matches the body.
  const auto split = response.find("\r\n\r\n");
  const auto lengthAt = response.find("Content-Length: ") + 16;
  EXPECT_EQ(std::stoul(response.substr(lengthAt)), response.size() - split - 4);
}

TEST_F(ServerTest, HealthAndReadiness) {
  EXPECT_EQ(get(server.port(), "/healthz").rfind("HTTP/1.1 200 OK", 0), 0u);
  const std::string notReady = get(server.port(), "/readyz");
  EXPECT_EQ(notReady.rfind("HTTP/1.1 503", 0), 0u);
  EXPECT_NE(notReady.find("runtime not initialised"), std::string::npos);
  ready = true;
  EXPECT_EQ(get(server.port(), "/readyz").rfind("HTTP/1.1 200 OK", 0), 0u);
  healthy = false;
  EXPECT_EQ(get(server.port(), "/healthz").rfind("HTTP/1.1 503", 0), 0u);
}

TEST_F(ServerTest, ErrorsAndMethods) {
  EXPECT_EQ(get(server.port(), "/nope").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(roundTrip(server.port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0),
            0u);
  EXPECT_EQ(roundTrip(server.port(), "garbage\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  const std::string head = roundTrip(server.port(), "HEAD /healthz HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");
  const std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_EQ(roundTrip(server.port(), huge).rfind("HTTP/1.1 431", 0), 0u);
}

TEST_F(ServerTest, SlowClientDoesNotBlockOthersAndIsDropped) {
  int silent = connectTo(server.port());
  ASSERT_GE(silent, 0);
  ::send(silent, "GET /met", 8, MSG_NOSIGNAL);  // and then nothing
  EXPECT_EQ(get(server.port(), "/healthz").rfind("HTTP/1.1 200", 0), 0u);
  // After the client timeout the server closes the silent connection.
  timeval tv{2, 0};
  ::setsockopt(silent, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char byte;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(::recv(silent, &byte, 1, 0), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ::close(silent);
}

TEST_F(ServerTest, StopClosesTheListener) {
  const auto port = server.port();
  server.stop();
  server.stop();  // idempotent
  EXPECT_EQ(connectTo(port), -1);
}

TEST(HttpServer, PortInUseThrows) {
  HttpServerOptions o;
  o.bindAddress = "127.0.0.1";
  o.port = 0;
  HttpServer first(o, [] { return std::vector<prometheus::MetricFamily>{}; });
  first.start();
  o.port = first.port();
  HttpServer second(o, [] { return std::vector<prometheus::MetricFamily>{}; });
  EXPECT_THROW(second.start(), std::system_error);
}

}  // namespace
}  // namespace metrics
}  // namespace rpcjob
