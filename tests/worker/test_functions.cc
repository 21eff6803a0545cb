#include "test_functions.h"

#include "rpcjob/runtime/remote_object.h"

#include <ATen/core/ivalue.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "autograd_functions.h"
#include "channels/mtcma/mtcma_channel.h"
#include "lane/lane.h"
#include "rpcjob/runtime/shared_host.h"

namespace rpcjob::testing {
namespace {

using runtime::CallInfo;
using Args = std::vector<c10::IValue>;

std::mutex heldMu;
std::vector<runtime::RRef> held;   // RRefs forked to this worker by "hold"
std::atomic<bool> started{false};  // markStarted()

// A linear layer with weights from its shape alone, so every process builds
// the same one (the pipeline test compares with a local computation).
struct Stage : torch::nn::Module {
  Stage(int64_t in, int64_t out, bool relu) : relu(relu) {
    linear = register_module("linear", torch::nn::Linear(in, out));
    torch::NoGradGuard noGrad;
    linear->weight.copy_(at::linspace(-1, 1, in * out).reshape({out, in}));
    linear->bias.copy_(at::linspace(-0.5, 0.5, out));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = linear->forward(x);
    return relu ? torch::nn::functional::relu(y) : y;
  }
  torch::nn::Linear linear{nullptr};
  bool relu;
};

// Counts the method calls running on it at once.
struct Counter {
  explicit Counter(int64_t start) : value(start) {}
  std::atomic<int64_t> value;
  std::atomic<int> active{0};
  std::atomic<int> maxActive{0};
  int64_t enter(int64_t sleepMs) {
    int now = ++active;
    int seen = maxActive.load();
    while (now > seen && !maxActive.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
    --active;
    return ++value;
  }
};

void registerCounter(runtime::Runtime& rt, const std::string& name, bool serialize) {
  runtime::registerClass<Counter>(rt, name, {serialize})
      .constructor([](Args args) { return std::make_shared<Counter>(args.at(0).toInt()); })
      .method("enter", [](Counter& c, Args args) { return c.enter(args.at(0).toInt()); })
      .method("add", [](Counter& c, Args args) { return c.value += args.at(0).toInt(); })
      .method("value", [](Counter& c, Args) { return c.value.load(); })
      .method("max_active", [](Counter& c, Args) { return int64_t{c.maxActive.load()}; })
      .method("raise",
              [](Counter&, Args) -> int64_t { throw std::runtime_error("counter says no"); })
      .method("reset", [](Counter& c, Args) { c.maxActive = 0; });
}

void registerStage(runtime::Runtime& rt, const std::string& name, bool relu) {
  // The tutorial's shards: forward takes an RRef to its input, fetches it, and
  // runs one call at a time (the tutorial's lock).
  runtime::registerClass<Stage>(rt, name, {true})
      .constructor([relu](Args args) {
        return std::make_shared<Stage>(args.at(0).toInt(), args.at(1).toInt(), relu);
      })
      .method("forward", [](Stage& s, Args args) {
        return s.forward(runtime::RRef::fromIValue(args.at(0)).toHere().toTensor());
      });
}

}  // namespace

at::Tensor pipelineReference(const at::Tensor& x) {
  Stage one(4, 8, true), two(8, 2, false);
  return two.forward(one.forward(x));
}

std::mutex arrivalsMu;
std::vector<int64_t> arrivals;

void markStarted() {
  started = true;
}

void registerTestFunctions(runtime::Runtime& rt) {
  registerAutogradTestFunctions(rt);
  // A worker serves while its start() still connects to the others.
  rt.registerFunction("started", [](const CallInfo&, Args) { return c10::IValue(started.load()); });
  rt.registerFunction("identity", [](const CallInfo&, Args args) { return args.at(0); });
  // What this process received over rpcjob_cma: (shared reads, cma reads, pushed).
  rt.registerFunction("mtcma_counters", [](const CallInfo&, Args) {
    const auto c = runtime::channels::mtCmaCounters();
    return c10::IValue(c10::ivalue::Tuple::create({static_cast<int64_t>(c.sharedReads),
                                                   static_cast<int64_t>(c.cmaReads),
                                                   static_cast<int64_t>(c.pushedReads)}));
  });
  // This process's shared-memory lane counters: (lanes up, declined, failed,
  // frames sent, frames received).
  rt.registerFunction("lane_counters", [](const CallInfo&, Args) {
    const auto c = runtime::lane::laneCounters();
    return c10::IValue(c10::ivalue::Tuple::create(
        {static_cast<int64_t>(c.lanesUp), static_cast<int64_t>(c.lanesDeclined),
         static_cast<int64_t>(c.lanesFailed), static_cast<int64_t>(c.framesSent),
         static_cast<int64_t>(c.framesReceived)}));
  });
  // Records the order in which its calls arrive (inline: on the reading
  // thread, pipe or lane); "arrivals" returns them and starts again.
  rt.registerFunction("record",
                      [](const CallInfo&, Args args) {
                        std::lock_guard<std::mutex> lock(arrivalsMu);
                        arrivals.push_back(args.at(0).toInt());
                        return c10::IValue();
                      },
                      {true});
  // The same, then a sleep of args[1] ms on the reading thread: while it
  // sleeps, that thread reads nothing more (a lane's ring fills up).
  rt.registerFunction("record_then_sleep",
                      [](const CallInfo&, Args args) {
                        {
                          std::lock_guard<std::mutex> lock(arrivalsMu);
                          arrivals.push_back(args.at(0).toInt());
                        }
                        std::this_thread::sleep_for(std::chrono::milliseconds(args.at(1).toInt()));
                        return c10::IValue();
                      },
                      {true});
  rt.registerFunction("arrivals", [](const CallInfo&, Args) {
    std::lock_guard<std::mutex> lock(arrivalsMu);
    c10::List<int64_t> out;
    for (int64_t a : arrivals) out.push_back(a);
    arrivals.clear();
    return c10::IValue(out);
  });
  // Whether the argument arrived in this process's shared arena.
  rt.registerFunction("is_shared_host", [](const CallInfo&, Args args) {
    return c10::IValue(runtime::isSharedHost(args.at(0).toTensor()));
  });
  rt.registerFunction("add",
                      [](const CallInfo&, Args args) {
                        return c10::IValue(args.at(0).toTensor().add(args.at(1).toTensor()));
                      },
                      {true});
  rt.registerFunction("raise", [](const CallInfo& call, Args args) -> c10::IValue {
    throw std::runtime_error("boom from " + call.runtime.self().name + ": " +
                             args.at(0).toStringRef());
  });
  rt.registerFunction("raise_inline",
                      [](const CallInfo& call, Args args) -> c10::IValue {
                        throw std::runtime_error("boom from " + call.runtime.self().name + ": " +
                                                 args.at(0).toStringRef());
                      },
                      {true});
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
  // Calls "caller" on every other worker at once: how many named us rightly.
  rt.registerFunction("all_to_all_callers", [](const CallInfo& call, Args) {
    std::vector<runtime::Future> futures;
    for (const auto& w : call.runtime.workers()) {
      if (w.name != call.runtime.self().name) {
        futures.push_back(call.runtime.rpcAsync(w.name, "caller", {}));
      }
    }
    int64_t right = 0;
    for (auto& f : futures) right += f.value().toStringRef() == call.runtime.self().name ? 1 : 0;
    return c10::IValue(right);
  });
  // How many workers this one has a pipe to (a handshake done), itself included.
  rt.registerFunction("peers_with_pipes", [](const CallInfo& call, Args) {
    std::set<std::string> peers;
    for (const auto& c : call.runtime.channelChoices()) peers.insert(c.peer);
    return c10::IValue(static_cast<int64_t>(peers.size()));
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
  // Receives anything (RRefs among it) and never looks at it.
  rt.registerFunction("ignore", [](const CallInfo&, Args) { return c10::IValue(); });
  // Passes an RRef on to another worker, which fetches its value (a fork chain).
  rt.registerFunction("pass_on", [](const CallInfo& call, Args args) {
    return call.runtime.rpcSync(args.at(0).toStringRef(), "to_here", {args.at(1)});
  });
  rt.registerFunction("to_here", [](const CallInfo&, Args args) {
    return runtime::RRef::fromIValue(args.at(0)).toHere();
  });
  // The sum of the tensors behind a list of RRefs.
  rt.registerFunction("sum_rrefs", [](const CallInfo&, Args args) {
    at::Tensor sum;
    for (const auto& r : args.at(0).toListRef()) {
      at::Tensor t = runtime::RRef::fromIValue(r).toHere().toTensor();
      sum = sum.defined() ? sum + t : t;
    }
    return c10::IValue(sum);
  });
  // A result that cannot be sent (a sparse tensor) beside an RRef owned here.
  rt.registerFunction("unsendable_with_rref", [](const CallInfo& call, Args) {
    return c10::IValue(c10::ivalue::Tuple::create(
        {call.runtime.makeRRef(int64_t{1}).toIValue(), at::ones({2}).to_sparse()}));
  });
  // An async function that blocks its thread before it returns.
  rt.registerAsyncFunction("async_block", [](const CallInfo&, Args args) {
    std::this_thread::sleep_for(std::chrono::milliseconds(args.at(0).toInt()));
    return runtime::Future::fromValue(args.at(0));
  });
  registerCounter(rt, "Counter", false);
  registerCounter(rt, "SerialCounter", true);
  registerStage(rt, "Stage1", true);
  registerStage(rt, "Stage2", false);
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
