#include "rpcjob/metrics/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <system_error>

#include <prometheus/text_serializer.h>

namespace rpcjob {
namespace metrics {
namespace {

using Clock = std::chrono::steady_clock;

void setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

std::system_error systemError(const char* what) {
  return std::system_error(errno, std::generic_category(), what);
}

const char* reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string response(int code, const std::string& contentType, const std::string& body,
                     bool headOnly = false) {
  std::ostringstream out;
  out << "HTTP/1.1 " << code << ' ' << reason(code) << "\r\n"
      << "Content-Type: " << contentType << "\r\n"
      << "Content-Length: " << body.size() << "\r\n"
      << "Connection: close\r\n";
  if (code == 405) {
    out << "Allow: GET, HEAD\r\n";
  }
  out << "\r\n";
  if (!headOnly) {
    out << body;
  }
  return out.str();
}

constexpr char kText[] = "text/plain; charset=utf-8";

}  // namespace

struct HttpServer::Client {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;
  std::string out;
  std::size_t written = 0;
  bool responding = false;
};

HttpServer::HttpServer(HttpServerOptions options, CollectFn collect, CheckFn healthy, CheckFn ready)
    : options_(std::move(options)),
      collect_(std::move(collect)),
      healthy_(std::move(healthy)),
      ready_(std::move(ready)) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  listenFd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listenFd_ < 0) {
    throw systemError("socket");
  }
  int one = 1;
  ::setsockopt(listenFd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(options_.port);
  if (::inet_pton(AF_INET, options_.bindAddress.c_str(), &addr.sin_addr) != 1) {
    ::close(listenFd_);
    listenFd_ = -1;
    throw std::system_error(EINVAL, std::generic_category(),
                            "bad bind address " + options_.bindAddress);
  }
  if (::bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0 ||
      ::listen(listenFd_, 64) < 0) {
    auto error = systemError(
        ("bind/listen " + options_.bindAddress + ":" + std::to_string(options_.port)).c_str());
    ::close(listenFd_);
    listenFd_ = -1;
    throw error;
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listenFd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  setNonBlocking(listenFd_);
  if (::pipe2(wakeFds_, O_CLOEXEC | O_NONBLOCK) < 0) {
    throw systemError("pipe2");
  }
  thread_ = std::thread([this] { run(); });
}

void HttpServer::stop() {
  if (thread_.joinable()) {
    char byte = 0;
    while (::write(wakeFds_[1], &byte, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
  }
  for (auto& client : clients_) {
    ::close(client->fd);
  }
  clients_.clear();
  for (int* fd : {&listenFd_, &wakeFds_[0], &wakeFds_[1]}) {
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  }
}

void HttpServer::run() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wakeFds_[0], POLLIN, 0});
    // Stop accepting while full: pending connections wait in the backlog.
    fds.push_back({clients_.size() < options_.maxClients ? listenFd_ : -1, POLLIN, 0});
    auto now = Clock::now();
    auto timeout = options_.clientTimeout;
    for (const auto& client : clients_) {
      fds.push_back({client->fd, static_cast<short>(client->responding ? POLLOUT : POLLIN), 0});
      timeout = std::min(
          timeout, std::chrono::duration_cast<std::chrono::milliseconds>(client->deadline - now));
    }
    int timeoutMs = static_cast<int>(std::max<std::int64_t>(0, timeout.count()) + 1);
    int n = ::poll(fds.data(), fds.size(), timeoutMs);
    if (n < 0 && errno != EINTR) {
      return;  // cannot happen with valid fds; nothing sensible left to do
    }
    if (fds[0].revents != 0) {
      return;  // stop()
    }
    // Clients first (their pollfds are at index 2..), then accept new ones.
    now = Clock::now();
    std::vector<std::unique_ptr<Client>> kept;
    for (size_t i = 0; i < clients_.size(); ++i) {
      Client& client = *clients_[i];
      const short revents = fds[i + 2].revents;
      bool keep = true;
      if (revents & (POLLERR | POLLNVAL)) {
        keep = false;
      } else if (revents & (POLLIN | POLLHUP)) {
        keep = client.responding ? writeTo(client) : readFrom(client);
      } else if (revents & POLLOUT) {
        keep = writeTo(client);
      } else if (now >= client.deadline) {
        keep = false;  // too slow: drop without an answer
      }
      if (keep) {
        kept.push_back(std::move(clients_[i]));
      } else {
        ::close(client.fd);
      }
    }
    clients_ = std::move(kept);
    if (fds[1].revents & POLLIN) {
      acceptClients();
    }
  }
}

void HttpServer::acceptClients() {
  while (clients_.size() < options_.maxClients) {
    int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      return;  // EAGAIN, or a client gone before accept: nothing to do
    }
    auto client = std::make_unique<Client>();
    client->fd = fd;
    client->deadline = Clock::now() + options_.clientTimeout;
    clients_.push_back(std::move(client));
  }
}

// Returns false when the connection is to be closed.
bool HttpServer::readFrom(Client& client) {
  char buffer[4096];
  for (;;) {
    ssize_t n = ::recv(client.fd, buffer, sizeof(buffer), 0);
    if (n == 0) {
      return false;  // closed before a full request
    }
    if (n < 0) {
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
    client.in.append(buffer, static_cast<size_t>(n));
    auto end = client.in.find("\r\n\r\n");
    if (end == std::string::npos) {
      end = client.in.find("\n\n");  // tolerate bare LF clients
    }
    if (end != std::string::npos && end <= options_.maxRequestBytes) {
      client.out = respond(client.in.substr(0, end));
    } else if (client.in.size() > options_.maxRequestBytes) {
      client.out = response(431, kText, "request head too large\n");
    } else {
      continue;
    }
    client.responding = true;
    client.in.clear();
    return writeTo(client);
  }
}

bool HttpServer::writeTo(Client& client) {
  while (client.written < client.out.size()) {
    ssize_t n = ::send(client.fd, client.out.data() + client.written,
                       client.out.size() - client.written, MSG_NOSIGNAL);
    if (n < 0) {
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
    client.written += static_cast<size_t>(n);
  }
  return false;  // all written: close (Connection: close)
}

std::string HttpServer::respond(const std::string& head) {
  std::istringstream lines(head);
  std::string method, target, version;
  lines >> method >> target >> version;
  if (method.empty() || target.empty() || version.rfind("HTTP/1.", 0) != 0) {
    return response(400, kText, "bad request\n");
  }
  const bool headOnly = method == "HEAD";
  if (method != "GET" && !headOnly) {
    return response(405, kText, "only GET and HEAD\n");
  }
  const std::string path = target.substr(0, target.find('?'));
  try {
    if (path == "/metrics") {
      return response(200, "text/plain; version=0.0.4; charset=utf-8", serialize(collect_()),
                      headOnly);
    }
    if (path == "/healthz" || path == "/readyz") {
      const CheckFn& check = path == "/healthz" ? healthy_ : ready_;
      std::string message;
      const bool ok = !check || check(message);
      if (message.empty()) {
        message = ok ? "ok" : "not ok";
      }
      return response(ok ? 200 : 503, kText, message + "\n", headOnly);
    }
  } catch (const std::exception& e) {
    return response(500, kText, std::string(e.what()) + "\n", headOnly);
  }
  return response(404, kText, "not found\n", headOnly);
}

std::string HttpServer::serialize(const std::vector<prometheus::MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace metrics
}  // namespace rpcjob
