// rpcjob-hello: every worker of the job greets every other worker and sends it a
// tensor, prints the answers, and leaves with the others (graceful shutdown).
//
// Who it is and who its peers are comes from the environment that `rpcjob run`
// and the operator give every worker (RPCJOB_ASSIGNMENT, RPCJOB_WORKER_NAME, ...),
// so the same binary runs locally and in a pod. So do its metrics
// (rpcjob::telemetry): per-channel bytes and per-function calls, on /metrics when
// the job sets a metrics port and in the final metrics file `rpcjob run` reads for
// its per-channel summary.
//
// Exit codes: 0 done, 1 an RPC failed, 2 no identity (not started by rpcjob).

#include <ATen/ATen.h>

#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/runtime/runtime.h"
#include "rpcjob/telemetry/exporter.h"
#include "rpcjob/version.h"

using rpcjob::runtime::CallInfo;
using rpcjob::runtime::Future;
using rpcjob::runtime::Runtime;

// 128 KiB of floats: above the runtime's 64 KiB inline limit, so the tensor and
// its answer travel by channel and show in the per-channel summary.
constexpr int64_t kElements = 1 << 15;

int main() {
  // The metrics first: they outlive the runtime (declared before it, destroyed
  // after it), and write the metrics file when they go.
  std::unique_ptr<rpcjob::telemetry::Exporter> metrics;
  std::unique_ptr<Runtime> rt;
  try {
    rpcjob::Identity identity = rpcjob::identityFromEnvironment();
    auto options = rpcjob::runtime::optionsFromAssignment(identity.assignment, identity.name);
    rpcjob::runtime::applyEnvironment(options);
    metrics = rpcjob::telemetry::fromEnvironment(identity);
    metrics->attach(options);  // count every channel's bytes and every call
    rt = std::make_unique<Runtime>(std::move(identity.assignment), identity.name,
                                   std::move(options));
  } catch (const std::exception& e) {
    std::cerr << "rpcjob-hello: cannot start (run it with `rpcjob run hello.yaml`): " << e.what()
              << "\n";
    return 2;
  }
  const auto& self = rt->self();
  const int world = static_cast<int>(rt->workers().size());

  // Only functions registered here can be called by peers. Both are quick and
  // never block, so they run inline on the thread that read the request.
  rt->registerFunction("hello.greet",
                       [](const CallInfo& call, std::vector<c10::IValue> args) {
                         const auto& me = call.runtime.self();
                         return c10::IValue("hello " + args.at(0).toStringRef() + ", this is " +
                                            me.name + " (rank " + std::to_string(me.rank) + ")");
                       },
                       {/*runInline=*/true});
  rt->registerFunction("hello.add_rank",
                       [](const CallInfo& call, std::vector<c10::IValue> args) {
                         return c10::IValue(args.at(0).toTensor() + call.runtime.self().rank);
                       },
                       {/*runInline=*/true});

  try {
    metrics->serve();  // /metrics, /healthz; /readyz once started
    rt->start();       // listens, and connects to every peer
    metrics->setReady();
    std::cout << self.name << ": rank " << self.rank << " of " << world << ", rpcjob "
              << RPCJOB_VERSION_STRING << std::endl;

    struct Pending {
      std::string peer;
      Future greeting;
      Future sum;
    };
    std::vector<Pending> pending;
    for (const auto& peer : rt->workers()) {
      if (peer.name == self.name) continue;
      pending.push_back({peer.name, rt->rpcAsync(peer.name, "hello.greet", {self.name}),
                         rt->rpcAsync(peer.name, "hello.add_rank", {at::ones({kElements})})});
    }
    for (auto& p : pending) {
      const std::string greeting = p.greeting.value().toStringRef();
      const double sum = p.sum.value().toTensor().sum().item<double>();
      std::cout << self.name << ": " << p.peer << " answered \"" << greeting << "\"; sum(ones("
                << kElements << ") + its rank) = " << sum << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << self.name << ": " << e.what() << "\n";
    rt->shutdown(rpcjob::runtime::ShutdownMode::kImmediate);
    return 1;
  }

  // Graceful: returns once no worker has calls outstanding, so nobody leaves
  // while a peer still waits for its answer.
  rt->shutdown();
  std::cout << self.name << ": done" << std::endl;
  return 0;
}
