#pragma once
// A scripted HttpClient: tests decide what every request gets, and see what was sent.

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "rpcjob/operator/http.h"

namespace rpcjob::testing {

class FakeHttp : public kube::HttpClient {
 public:
  std::function<kube::HttpResponse(const kube::HttpRequest&)> onSend;
  std::function<kube::StreamResult(const kube::HttpRequest&, const kube::LineHandler&,
                                   kube::Cancellation&)>
      onStream;

  kube::HttpResponse send(const kube::HttpRequest& r) override {
    log(r);
    return onSend(r);
  }
  kube::StreamResult stream(const kube::HttpRequest& r, std::chrono::milliseconds,
                            const kube::LineHandler& onLine, kube::Cancellation& cancel) override {
    log(r);
    return onStream(r, onLine, cancel);
  }
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

  static kube::HttpResponse json(int status, std::string body) {
    kube::HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }
  // Delivers `lines`, then ends like `end` (kCancelled when a line was refused).
  static kube::StreamResult deliver(const std::vector<std::string>& lines,
                                    const kube::LineHandler& onLine,
                                    kube::StreamEnd end = kube::StreamEnd::kEof) {
    kube::StreamResult r;
    r.status = 200;
    for (const auto& l : lines) {
      if (!onLine(l)) {
        r.end = kube::StreamEnd::kCancelled;
        return r;
      }
    }
    r.end = end;
    return r;
  }
  static kube::StreamResult blockUntilCancelled(kube::Cancellation& cancel) {
    while (!cancel.sleepFor(std::chrono::milliseconds(50))) {
    }
    kube::StreamResult r;
    r.end = kube::StreamEnd::kCancelled;
    return r;
  }

 private:
  void log(const kube::HttpRequest& r) {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(r.method + " " + r.target);
  }
  mutable std::mutex mu_;
  std::vector<std::string> requests_;
};

}  // namespace rpcjob::testing
