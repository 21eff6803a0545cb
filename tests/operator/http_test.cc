// The cpprestsdk HttpClient against a scripted plain-HTTP server on a free port:
// streams deliver lines, and no call outlives its deadline, whatever the server does.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rpcjob/operator/http_cpprest.h"

namespace rpcjob::kube {
namespace {

using namespace std::chrono_literals;

// Accepts connections on 127.0.0.1:0 and runs `script(fd)` for each one.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::function<void(int fd)> script) : script_(std::move(script)) {
    listen_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(listen_, 8);
    thread_ = std::thread([this] {
      for (;;) {
        int fd = accept(listen_, nullptr, nullptr);
        if (fd < 0 || stopping_) {
          if (fd >= 0) close(fd);
          return;
        }
        fds_.push_back(fd);
        readRequest(fd);
        script_(fd);
      }
    });
  }
  ~ScriptedServer() {
    stopping_ = true;
    shutdown(listen_, SHUT_RDWR);
    close(listen_);
    thread_.join();
    for (int fd : fds_) close(fd);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  static void send(int fd, const std::string& s) { (void)!::write(fd, s.data(), s.size()); }
  static std::string chunk(const std::string& s) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", s.size());
    return size + s + "\r\n";
  }

 private:
  static void readRequest(int fd) {
    std::string got;
    char buf[4096];
    while (got.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
    }
  }

  std::function<void(int)> script_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::vector<int> fds_;
  std::thread thread_;
};

const char* kChunkedHeaders =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

std::unique_ptr<HttpClient> clientFor(const ScriptedServer& s) {
  HttpClientOptions o;
  o.baseUrl = s.url();
  return makeCpprestHttpClient(o);
}

TEST(CpprestHttp, StreamDeliversLinesUntilEof) {
  ScriptedServer server([](int fd) {
    ScriptedServer::send(fd, kChunkedHeaders);
    ScriptedServer::send(fd, ScriptedServer::chunk("{\"n\":1}\n{\"n\""));
    ScriptedServer::send(fd, ScriptedServer::chunk(":2}\n"));
    ScriptedServer::send(fd, "0\r\n\r\n");
  });
  auto client = clientFor(server);
  Cancellation cancel;
  std::vector<std::string> lines;
  HttpRequest req;
  req.target = "/watch?x=1";
  StreamResult r = client->stream(
      req, 5s,
      [&](std::string_view l) {
        lines.emplace_back(l);
        return true;
      },
      cancel);
  EXPECT_EQ(r.end, StreamEnd::kEof) << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"n\":1}", "{\"n\":2}"}));
}

TEST(CpprestHttp, SilentStreamEndsAtTheIdleDeadline) {
  ScriptedServer server([](int fd) {
    ScriptedServer::send(fd, kChunkedHeaders);
    ScriptedServer::send(fd, ScriptedServer::chunk("{\"n\":1}\n"));
    // ... and then nothing, with the connection open.
  });
  auto client = clientFor(server);
  Cancellation cancel;
  int lines = 0;
  auto start = std::chrono::steady_clock::now();
  StreamResult r = client->stream(
      HttpRequest{}, 300ms,
      [&](std::string_view) {
        ++lines;
        return true;
      },
      cancel);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.end, StreamEnd::kIdle);
  EXPECT_EQ(lines, 1);
  EXPECT_LT(took, 3s);
}

TEST(CpprestHttp, CancelStopsAStreamFromAnotherThread) {
  ScriptedServer server([](int fd) { ScriptedServer::send(fd, kChunkedHeaders); });
  auto client = clientFor(server);
  Cancellation cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    cancel.cancel();
  });
  auto start = std::chrono::steady_clock::now();
  StreamResult r = client->stream(
      HttpRequest{}, 30s, [](std::string_view) { return true; }, cancel);
  canceller.join();
  EXPECT_EQ(r.end, StreamEnd::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(CpprestHttp, SendHonoursItsDeadlineWhenTheServerNeverAnswers) {
  ScriptedServer server([](int) {});
  auto client = clientFor(server);
  HttpRequest req;
  req.timeout = 200ms;
  auto start = std::chrono::steady_clock::now();
  HttpResponse r = client->send(req);
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(r.timedOut);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(CpprestHttp, SendReturnsStatusHeadersAndBody) {
  ScriptedServer server([](int fd) {
    ScriptedServer::send(fd,
                         "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                         "X-Thing: 1\r\nContent-Length: 2\r\n\r\n{}");
  });
  auto client = clientFor(server);
  HttpResponse r = client->send(HttpRequest{});
  EXPECT_EQ(r.status, 404) << r.error;
  EXPECT_EQ(r.body, "{}");
  EXPECT_EQ(r.headers["x-thing"], "1");
}

TEST(CpprestHttp, ConnectionRefusedIsAValue) {
  int port;
  {
    ScriptedServer s([](int) {});
    port = std::stoi(s.url().substr(s.url().rfind(':') + 1));
  }
  HttpClientOptions o;
  o.baseUrl = "http://127.0.0.1:" + std::to_string(port);
  HttpResponse r = makeCpprestHttpClient(o)->send(HttpRequest{});
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.error.empty());
}

}  // namespace
}  // namespace rpcjob::kube
