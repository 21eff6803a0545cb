// The scenario of runtime_lifetime_test, in a process of its own: the bug it
// checks for is undefined behaviour, which must not take the test binary down.
// An async function's result that completes after its Runtime was destroyed is
// dropped, not answered through the destroyed runtime's members. Two runtimes
// in this process, so that the one destroyed is ours to destroy; the runtime's
// trace points (trace.h) say whether it still answered.
#include <ATen/core/ivalue.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/port_reservation.h"
#include "rpcjob/runtime/runtime.h"
#include "trace/trace.h"

namespace rpcjob::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Whether this thread's trace shows "serve.reply" after "test.destroyed".
bool repliedAfterDestruction(const std::string& dir) {
  std::ifstream in(dir + "/trace-" + std::to_string(::getpid()) + ".txt");
  const std::string tid = std::to_string(::gettid());
  bool destroyed = false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);  // NANOSECONDS PID TID WHAT ID
    std::string nanos, pid, thread, what;
    fields >> nanos >> pid >> thread >> what;
    if (thread != tid) continue;
    if (what == "test.destroyed") destroyed = true;
    if (destroyed && what == "serve.reply") return true;
  }
  return false;
}

// The exit code says what happened: 0 the late result was dropped, 4 the
// destroyed runtime answered it, others the set-up failed.
[[noreturn]] void completeAfterTheRuntimeIsGone() {
  char dir[] = "/tmp/rpcjob-lifetime-XXXXXX";
  if (::mkdtemp(dir) == nullptr) std::_Exit(5);
  runtime::trace::enable(dir);
  PortReservation ports(2);
  const std::string peers = "a@127.0.0.1:" + std::to_string(ports.ports()[0]) +
                            ",b@127.0.0.1:" + std::to_string(ports.ports()[1]);
  runtime::Runtime a(assignmentFromPeerList(peers), "a", runtime::RuntimeOptions{});
  auto b = std::make_unique<runtime::Runtime>(assignmentFromPeerList(peers), "b",
                                              runtime::RuntimeOptions{});
  runtime::Promise promise;
  std::atomic<bool> called{false};
  b->registerAsyncFunction("later", [&](const runtime::CallInfo&, std::vector<c10::IValue>) {
    called = true;
    return promise.future();
  });
  std::thread startB([&] { b->start(); });
  a.start();
  startB.join();
  runtime::Future pending = a.rpcAsync("b", "later", {});
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!called && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!called) std::_Exit(2);
  b.reset();  // an immediate shutdown, then its members are destroyed
  if (!pending.waitFor(std::chrono::seconds(10)) || !pending.hasError()) std::_Exit(3);
  runtime::trace::point("test.destroyed");
  promise.setValue(c10::IValue(int64_t{1}));  // the late result: answered here, if at all
  a.shutdown(runtime::ShutdownMode::kImmediate);
  if (!runtime::trace::flush()) std::_Exit(6);
  const bool replied = repliedAfterDestruction(dir);
  std::system(("rm -rf " + std::string(dir)).c_str());
  std::_Exit(replied ? 4 : 0);
}

}  // namespace
}  // namespace rpcjob::testing

int main() {
  rpcjob::testing::completeAfterTheRuntimeIsGone();
}
