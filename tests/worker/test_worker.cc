// A worker process for the runtime tests: serves the test functions until every
// worker (the test driver is rank 0) shuts down. Identity from the environment.
// "handshake_failures"(reason) answers how many pipes its authentication
// refused for that reason (Observer::handshakeFailed), for tests/worker/auth_test.cc.
#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/runtime/runtime.h"
#include "test_functions.h"

namespace {

using namespace rpcjob::runtime;

class HandshakeCounter : public Observer {
 public:
  CallToken callStarted(const std::string&, const std::string&, const EventTime&) override {
    return {};
  }
  void callFinished(const std::string&, const std::string&, CallStatus, CallToken,
                    const EventTime&) override {}
  CallToken serverCallStarted(const std::string&, const std::string&, const EventTime&) override {
    return {};
  }
  void serverCallFinished(const std::string&, const std::string&, CallStatus, CallToken,
                          const EventTime&) override {}
  void pipeOpened(const std::string&, std::chrono::nanoseconds) override {}
  void channelSelected(const std::string&, const std::string&, const std::string&,
                       const std::string&) override {}
  void handshakeFailed(const char* reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    counts_[reason]++;
  }
  int64_t count(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    return counts_[reason];
  }

 private:
  std::mutex mu_;
  std::map<std::string, int64_t> counts_;
};

}  // namespace

int main() {
  try {
    rpcjob::Identity identity = rpcjob::identityFromEnvironment();
    RuntimeOptions options = optionsFromAssignment(identity.assignment, identity.name);
    applyEnvironment(options);
    auto counter = std::make_shared<HandshakeCounter>();
    options.observer = counter;
    Runtime rt(std::move(identity.assignment), identity.name, std::move(options));
    rpcjob::testing::registerTestFunctions(rt);
    rt.registerFunction("handshake_failures",
                        [counter](const CallInfo&, std::vector<c10::IValue> args) {
                          return c10::IValue(counter->count(args.at(0).toStringRef()));
                        });
    rt.start();
    rpcjob::testing::markStarted();
    // RPCJOB_TEST_JOIN_DELAY_MS: serve that long, then call every other worker,
    // before joining the shutdown: a worker late to join that still needs its
    // peers, as one still starting does. A peer gone by then fails the worker.
    if (const char* delay = std::getenv("RPCJOB_TEST_JOIN_DELAY_MS")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
      for (const auto& w : rt.workers()) {
        if (w.name != rt.self().name) rt.rpcSync(w.name, "identity", {int64_t{1}});
      }
    }
    rt.shutdown(ShutdownMode::kGraceful, std::chrono::seconds(300));
  } catch (const std::exception& e) {
    std::cerr << "test worker: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
