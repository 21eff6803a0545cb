// rpcjob-hello: every worker of the job greets every other worker and sends it a
// tensor, prints the answers, and leaves with the others (graceful shutdown).
//
// Who it is and who its peers are comes from the environment that `rpcjob run`
// and the operator give every worker (RPCJOB_ASSIGNMENT, RPCJOB_WORKER_NAME, ...),
// so the same binary runs locally and in a pod.
//
// Exit codes: 0 done, 1 an RPC failed, 2 no identity (not started by rpcjob).

#include <ATen/ATen.h>

#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/runtime/runtime.h"
#include "rpcjob/version.h"

using rpcjob::runtime::CallInfo;
using rpcjob::runtime::Future;
using rpcjob::runtime::Runtime;

int main() {
  std::unique_ptr<Runtime> rt;
  try {
    rt = Runtime::fromEnvironment();
  } catch (const std::exception& e) {
    std::cerr << "rpcjob-hello: no worker identity (run it with `rpcjob run hello.yaml`): "
              << e.what() << "\n";
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
    rt->start();  // listens, and connects to every peer
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
                         rt->rpcAsync(peer.name, "hello.add_rank", {at::ones({4})})});
    }
    for (auto& p : pending) {
      const std::string greeting = p.greeting.value().toStringRef();
      const double sum = p.sum.value().toTensor().sum().item<double>();
      std::cout << self.name << ": " << p.peer << " answered \"" << greeting
                << "\"; sum(ones(4) + its rank) = " << sum << std::endl;
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
