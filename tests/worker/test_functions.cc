#include "test_functions.h"

#include <ATen/core/ivalue.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "autograd_functions.h"

namespace rpcjob::testing {
namespace {

using runtime::CallInfo;
using Args = std::vector<c10::IValue>;

std::mutex heldMu;
std::vector<runtime::RRef> held;   // RRefs forked to this worker by "hold"
std::atomic<bool> started{false};  // markStarted()

}  // namespace

void markStarted() {
  started = true;
}

void registerTestFunctions(runtime::Runtime& rt) {
  registerAutogradTestFunctions(rt);
  // A worker serves while its start() still connects to the others.
  rt.registerFunction("started", [](const CallInfo&, Args) { return c10::IValue(started.load()); });
  rt.registerFunction("identity", [](const CallInfo&, Args args) { return args.at(0); });
  rt.registerFunction("add",
                      [](const CallInfo&, Args args) {
                        return c10::IValue(args.at(0).toTensor().add(args.at(1).toTensor()));
                      },
                      {true});
  rt.registerFunction("raise", [](const CallInfo& call, Args args) -> c10::IValue {
    throw std::runtime_error("boom from " + call.runtime.self().name + ": " +
                             args.at(0).toStringRef());
  });
  rt.registerFunction("sleep_ms", [](const CallInfo&, Args args) {
    std::this_thread::sleep_for(std::chrono::milliseconds(args.at(0).toInt()));
    return args.at(0);
  });
  rt.registerFunction("caller",
                      [](const CallInfo& call, Args) { return c10::IValue(call.caller.name); });
  // Forwards to another worker: a function that blocks on a nested call (pool).
  rt.registerFunction("call_peer", [](const CallInfo& call, Args args) {
    return call.runtime.rpcSync(args.at(0).toStringRef(), "identity", {args.at(1)});
  });
  // Calls identity on every other worker at once and returns how many answered.
  rt.registerFunction("all_to_all", [](const CallInfo& call, Args) {
    std::vector<runtime::Future> futures;
    for (const auto& w : call.runtime.workers()) {
      if (w.name != call.runtime.self().name) {
        futures.push_back(call.runtime.rpcAsync(w.name, "identity", {c10::IValue(w.name)}));
      }
    }
    int64_t ok = 0;
    for (auto& f : futures) ok += f.value().toStringRef().empty() ? 0 : 1;
    return c10::IValue(ok);
  });
  rt.registerFunction("hold", [](const CallInfo& call, Args args) {
    runtime::RRef r = call.runtime.rrefFromIValue(args.at(0));
    r.confirmed().value();  // the owner registered our fork
    std::lock_guard<std::mutex> lock(heldMu);
    held.push_back(std::move(r));
    return c10::IValue();
  });
  rt.registerFunction("fetch_held", [](const CallInfo&, Args) {
    runtime::RRef r;
    {
      std::lock_guard<std::mutex> lock(heldMu);
      r = held.at(0);
    }
    return r.toHere();
  });
  rt.registerFunction("release", [](const CallInfo&, Args) {
    std::vector<runtime::RRef> drop;
    {
      std::lock_guard<std::mutex> lock(heldMu);
      drop.swap(held);
    }
    return c10::IValue(static_cast<int64_t>(drop.size()));
  });
}

}  // namespace rpcjob::testing
