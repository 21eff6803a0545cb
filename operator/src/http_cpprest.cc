// HttpClient on cpprestsdk (Boost.Asio underneath). The only file that includes
// cpprest/http_client.h (about 9 s of compile time per translation unit).
//
// Deadlines are ours, not cpprestsdk's: the client's own timeout is set very long
// (cpprestsdk applies it to every read, which would cut long watches), and every
// wait on a pplx task here is bounded. On a deadline or a Cancellation the
// request's pplx cancellation token fires, which makes cpprestsdk close the
// connection, so nothing keeps reading in the background.

#include "rpcjob/operator/http_cpprest.h"

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace rpcjob::kube {
namespace {

namespace http = web::http;

// The outcome of a pplx task, waited for with a deadline.
template <typename T>
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<T> value;
  std::string error;
};

template <typename T>
std::shared_ptr<Outcome<T>> track(pplx::task<T> task) {
  auto out = std::make_shared<Outcome<T>>();
  task.then([out](pplx::task<T> t) {
    std::optional<T> v;
    std::string err;
    try {
      v = t.get();
    } catch (const pplx::task_canceled&) {
      err = "cancelled";
    } catch (const std::exception& e) {
      err = e.what();
    } catch (...) {
      err = "unknown error";
    }
    std::lock_guard<std::mutex> lock(out->mu);
    out->value = std::move(v);
    out->error = std::move(err);
    out->done = true;
    out->cv.notify_all();
  });
  return out;
}

// Waits until the task finished, `timeout` passed, or `cancel` fired. Returns
// true when finished.
template <typename T>
bool waitFor(const std::shared_ptr<Outcome<T>>& out, std::chrono::milliseconds timeout,
             Cancellation* cancel) {
  std::optional<CancelRegistration> reg;
  if (cancel) {
    reg.emplace(*cancel, [out] {
      std::lock_guard<std::mutex> lock(out->mu);
      out->cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(out->mu);
  out->cv.wait_for(lock, timeout,
                   [&] { return out->done || (cancel != nullptr && cancel->cancelled()); });
  return out->done;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

class CpprestHttpClient final : public HttpClient {
 public:
  explicit CpprestHttpClient(const HttpClientOptions& options)
      : userAgent_(options.userAgent), client_(makeClient(options)) {}

  HttpResponse send(const HttpRequest& request) override {
    HttpResponse result;
    pplx::cancellation_token_source cts;
    auto response = std::make_shared<HttpResponse>();
    auto task = client_.request(toCpprest(request), cts.get_token())
                    .then([response](http::http_response r) {
                      response->status = r.status_code();
                      for (const auto& h : r.headers())
                        response->headers[lower(h.first)] = h.second;
                      return r.extract_utf8string(true);
                    });
    auto out = track(task);
    if (!waitFor(out, request.timeout, nullptr)) {
      cts.cancel();
      result.timedOut = true;
      result.error = "timed out after " + std::to_string(request.timeout.count()) + " ms";
      return result;
    }
    std::lock_guard<std::mutex> lock(out->mu);
    if (!out->value) {
      result.error = out->error;
      return result;
    }
    result.status = response->status;
    result.headers = response->headers;
    result.body = std::move(*out->value);
    return result;
  }

  StreamResult stream(const HttpRequest& request, std::chrono::milliseconds idleTimeout,
                      const LineHandler& onLine, Cancellation& cancel) override {
    StreamResult result;
    pplx::cancellation_token_source cts;
    CancelRegistration reg(cancel, [cts]() mutable { cts.cancel(); });
    auto headers = track(client_.request(toCpprest(request), cts.get_token()));
    if (!waitFor(headers, idleTimeout, &cancel)) {
      cts.cancel();
      result.end = cancel.cancelled() ? StreamEnd::kCancelled : StreamEnd::kIdle;
      return result;
    }
    http::http_response response;
    {
      std::lock_guard<std::mutex> lock(headers->mu);
      if (!headers->value) {
        result.end = cancel.cancelled() ? StreamEnd::kCancelled : StreamEnd::kError;
        result.error = headers->error;
        return result;
      }
      response = *headers->value;
    }
    result.status = response.status_code();
    if (result.status < 200 || result.status > 299) {
      auto body = track(response.extract_utf8string(true));
      if (waitFor(body, idleTimeout, &cancel)) {
        std::lock_guard<std::mutex> lock(body->mu);
        if (body->value) result.body = *body->value;
      }
      cts.cancel();
      result.end = StreamEnd::kError;
      return result;
    }
    auto bodyStream = response.body();
    for (;;) {
      concurrency::streams::container_buffer<std::string> buffer;
      auto line = track(bodyStream.read_line(buffer));
      if (!waitFor(line, idleTimeout, &cancel)) {
        cts.cancel();
        result.end = cancel.cancelled() ? StreamEnd::kCancelled : StreamEnd::kIdle;
        return result;
      }
      {
        std::lock_guard<std::mutex> lock(line->mu);
        if (!line->value) {
          result.end = cancel.cancelled() ? StreamEnd::kCancelled : StreamEnd::kError;
          result.error = line->error;
          return result;
        }
      }
      const std::string& text = buffer.collection();
      if (!text.empty() && !onLine(text)) {
        cts.cancel();
        result.end = StreamEnd::kCancelled;
        return result;
      }
      if (text.empty() && bodyStream.is_eof()) {
        result.end = StreamEnd::kEof;
        return result;
      }
    }
  }

 private:
  static http::client::http_client makeClient(const HttpClientOptions& options) {
    http::client::http_client_config config;
    config.set_timeout(std::chrono::hours(24));
    const TlsOptions tls = options.tls;
    if (tls.insecureSkipVerify) config.set_validate_certificates(false);
    if (!tls.caPem.empty() || !tls.clientCertPem.empty()) {
      config.set_ssl_context_callback([tls](boost::asio::ssl::context& ctx) {
        if (!tls.caPem.empty()) {
          ctx.add_certificate_authority(boost::asio::buffer(tls.caPem.data(), tls.caPem.size()));
        }
        if (!tls.clientCertPem.empty()) {
          ctx.use_certificate_chain(
              boost::asio::buffer(tls.clientCertPem.data(), tls.clientCertPem.size()));
          ctx.use_private_key(boost::asio::buffer(tls.clientKeyPem.data(), tls.clientKeyPem.size()),
                              boost::asio::ssl::context::pem);
        }
      });
    }
    return http::client::http_client(web::uri(options.baseUrl), config);
  }

  http::http_request toCpprest(const HttpRequest& r) const {
    http::http_request req(r.method);
    req.set_request_uri(web::uri(r.target));
    req.headers().add("User-Agent", userAgent_);
    for (const auto& [name, value] : r.headers) req.headers().add(name, value);
    if (!r.body.empty() || r.method == "POST" || r.method == "PUT" || r.method == "PATCH") {
      req.set_body(r.body, r.contentType.empty() ? "application/json" : r.contentType);
    }
    return req;
  }

  std::string userAgent_;
  http::client::http_client client_;
};

}  // namespace

std::unique_ptr<HttpClient> makeCpprestHttpClient(const HttpClientOptions& options) {
  // OpenSSL registers an atexit cleanup on its first initialisation, and cpprestsdk
  // joins its static thread pool in a later exit handler. A thread still freeing a
  // cancelled request's SSL connection then blocks forever on a lock the cleanup
  // already destroyed, and the process never exits (seen as rpcjob-operator hanging
  // after "stopped"). Initialise OpenSSL here, before cpprestsdk does, without that
  // atexit handler: the OS reclaims its memory at exit anyway.
  static const bool kOpensslReady =
      OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT | OPENSSL_INIT_LOAD_SSL_STRINGS, nullptr) == 1;
  if (!kOpensslReady) throw std::runtime_error("cannot initialise OpenSSL");
  return std::make_unique<CpprestHttpClient>(options);
}

}  // namespace rpcjob::kube
