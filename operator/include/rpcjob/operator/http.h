#pragma once
// The operator's own small HTTP interface. The Kubernetes client is written
// against it, never against an HTTP library; the one implementation today is on
// cpprestsdk (http_cpprest.h), which is archived upstream, so it must stay
// replaceable: nothing outside http_cpprest.cc includes cpprest/http_client.h.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rpcjob/operator/cancellation.h"

namespace rpcjob::kube {

struct HttpRequest {
  std::string method = "GET";
  std::string target;  // path and query, already percent-encoded: "/api/v1/pods?limit=10"
  std::vector<std::pair<std::string, std::string>> headers;
  std::string contentType;  // sent with a body
  std::string body;
  // The whole call (headers and body) must finish within this time.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

struct HttpResponse {
  int status = 0;  // 0: no HTTP answer (connection refused, TLS failure, timeout)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string error;  // why, when status == 0
  bool timedOut = false;
};

// How a streaming call ended.
enum class StreamEnd {
  kEof,        // the server closed the body normally
  kIdle,       // nothing arrived within the idle timeout
  kCancelled,  // the caller's Cancellation fired, or onLine returned false
  kError,      // transport error or non-2xx status (see StreamResult)
};

struct StreamResult {
  StreamEnd end = StreamEnd::kError;
  int status = 0;     // HTTP status, 0 when none arrived
  std::string body;   // the body when the status was not 2xx
  std::string error;  // transport error text
};

// Called with each line of a streaming body (without the newline). Return false
// to stop the stream.
using LineHandler = std::function<bool(std::string_view line)>;

class HttpClient {
 public:
  virtual ~HttpClient() = default;

  // One request and its complete response. Never throws for network errors: they
  // come back as status 0 with `error` set.
  virtual HttpResponse send(const HttpRequest& request) = 0;

  // A request whose 2xx body is a stream of lines (a watch). Blocks until the
  // stream ends. `idleTimeout` bounds the wait for the headers and for each line,
  // so a silent server never hangs the caller; request.timeout is ignored.
  virtual StreamResult stream(const HttpRequest& request, std::chrono::milliseconds idleTimeout,
                              const LineHandler& onLine, Cancellation& cancel) = 0;
};

// TLS settings of a connection to one server. PEM text, not file names, so that
// inline kubeconfig data and files are handled alike.
struct TlsOptions {
  std::string caPem;  // trust only these CAs when set; else the system's
  bool insecureSkipVerify = false;
  std::string clientCertPem;  // client certificate chain (with clientKeyPem)
  std::string clientKeyPem;
};

struct HttpClientOptions {
  std::string baseUrl;  // "https://127.0.0.1:6443"
  TlsOptions tls;
  std::string userAgent = "rpcjob-operator";
};

}  // namespace rpcjob::kube
