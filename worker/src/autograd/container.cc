#include "autograd/container.h"

#include <c10/util/Exception.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>
#include <unordered_set>

#include "autograd/gradient_wire.h"
#include "autograd/local_engine.h"
#include "autograd/stream_handoff.h"
#include "autograd/tensor_walk.h"
#include "future_state.h"
#include "release_later.h"
#include "rpcjob/runtime/dist_autograd.h"
#include "runtime_impl.h"
#include "trace/trace.h"

namespace rpcjob::runtime::autograd {
namespace {

thread_local int64_t tlsContext = 0;

// Autograd's own calls never join a context: a late one would bring a
// released context back to life.
bool takesPart(const wire::Header& h) {
  if (h.type == wire::MessageType::kRRefFetch) return true;
  if (h.type != wire::MessageType::kCall && h.type != wire::MessageType::kRemoteCall) return false;
  return h.function.rfind("rpcjob.autograd.", 0) != 0;
}

// The graph's parts the backward pass captures gradients at: the leaves it
// reaches and the RecvFunctions (tensors that came from other workers).
struct GraphEnds {
  std::vector<std::shared_ptr<torch::autograd::AccumulateGrad>> leaves;
  std::vector<std::shared_ptr<RecvFunction>> recvs;
};

GraphEnds scan(const torch::autograd::edge_list& roots) {
  GraphEnds ends;
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<std::shared_ptr<torch::autograd::Node>> stack;
  for (const auto& e : roots) {
    if (e.function && seen.insert(e.function.get()).second) stack.push_back(e.function);
  }
  while (!stack.empty()) {
    std::shared_ptr<torch::autograd::Node> node = std::move(stack.back());
    stack.pop_back();
    if (auto leaf = std::dynamic_pointer_cast<torch::autograd::AccumulateGrad>(node)) {
      ends.leaves.push_back(std::move(leaf));
      continue;
    }
    if (auto recv = std::dynamic_pointer_cast<RecvFunction>(node)) {
      ends.recvs.push_back(std::move(recv));
      continue;
    }
    for (const auto& e : node->next_edges()) {
      if (e.function && seen.insert(e.function.get()).second) stack.push_back(e.function);
    }
  }
  return ends;
}

}  // namespace

int64_t currentContext() {
  return tlsContext;
}

void setCurrentContext(int64_t id) {
  tlsContext = id;
}

CurrentContextScope::CurrentContextScope(int64_t id) : previous_(tlsContext) {
  tlsContext = id;
}

CurrentContextScope::~CurrentContextScope() {
  tlsContext = previous_;
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

Future whenAll(const std::vector<Future>& futures, bool failFast) {
  if (futures.empty()) return Future::fromValue(c10::IValue());
  struct Join {
    std::atomic<size_t> left;
    std::mutex mu;
    std::exception_ptr error;
    std::shared_ptr<detail::FutureState> done = detail::newFutureState(nullptr);
  };
  auto join = std::make_shared<Join>();
  join->left = futures.size();
  for (const auto& f : futures) {
    f.addInlineCallback([join, failFast](const Future& one) {
      if (one.hasError()) {
        if (failFast) {
          join->done->fail(one.error());
        } else {
          std::lock_guard<std::mutex> lock(join->mu);
          if (!join->error) join->error = one.error();
        }
      }
      if (--join->left == 0) {
        std::lock_guard<std::mutex> lock(join->mu);
        if (join->error) {
          join->done->fail(join->error);
        } else {
          join->done->complete(c10::IValue());
        }
      }
    });
  }
  return Future(join->done);
}

Container::Container(RuntimeImpl& runtime) : runtime_(runtime) {}
Container::~Container() = default;

int64_t Container::create() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t id = (static_cast<int64_t>(runtime_.self().rank) << 48) | nextLocal_++;
  contexts_.emplace(id, std::make_shared<ContextState>(id));
  return id;
}

std::shared_ptr<ContextState> Container::find(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(id);
  return it == contexts_.end() ? nullptr : it->second;
}

std::shared_ptr<ContextState> Container::get(int64_t id) const {
  auto ctx = find(id);
  if (!ctx) {
    throw RpcError(ErrorCode::kInvalidArgument, runtime_.self().name,
                   "no distributed autograd context " + std::to_string(id) + " on worker '" +
                       runtime_.self().name + "'");
  }
  return ctx;
}

std::vector<int64_t> Container::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> ids;
  for (const auto& entry : contexts_) ids.push_back(entry.first);
  return ids;
}

Future Container::release(int64_t id) {
  std::shared_ptr<ContextState> ctx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(id);
    if (it == contexts_.end()) return Future::fromValue(c10::IValue());
    ctx = std::move(it->second);
    contexts_.erase(it);
  }
  std::vector<Future> released;
  for (int rank : ctx->knownWorkers()) {
    released.push_back(runtime_.rpcAsync(runtime_.workers()[rank].name, kRelease, {id}, {}));
  }
  // Frees this worker's graph parts (the last reference may be a future's), at
  // this worker's next GPU step: the peer that asked may be computing on a GPU
  // we share (release_later.h).
  struct Forget {
    std::shared_ptr<ContextState> ctx;
    ~Forget() {
      if (ctx) ctx->forgetSends();
    }
  };
  auto forget = std::make_shared<Forget>();
  forget->ctx = std::move(ctx);
  releaseLater(std::move(forget), 0);
  return whenAll(released, /*failFast=*/false);
}

void Container::attach(ContextState& ctx, wire::Header& header, const c10::IValue* value) {
  header.hasAutograd = true;
  header.autogradContext = ctx.id();
  if (value == nullptr || !torch::autograd::GradMode::is_enabled()) return;
  std::vector<at::Tensor> tracked;
  std::vector<bool> flags;
  forEachTensor(*value, [&](const at::Tensor& t) {
    bool needsGrad = t.defined() && t.requires_grad();
    flags.push_back(needsGrad);
    if (needsGrad) tracked.push_back(t);
  });
  if (tracked.empty()) return;
  auto record = std::make_shared<SendRecord>();
  record->edges = torch::autograd::collect_next_edges(tracked);
  for (const auto& t : tracked) record->devices.push_back(t.device());
  header.autogradSendId = ctx.addSend(std::move(record));
  header.requiresGrad = std::move(flags);
}

void Container::onSendRequest(wire::Header& header, const c10::IValue* value, int to) {
  int64_t id = tlsContext;
  if (id == 0 || !takesPart(header)) return;
  auto ctx = find(id);
  if (!ctx) return;  // a context of another runtime in this process
  ctx->addKnownWorker(to);
  attach(*ctx, header, value);
}

void Container::onSendResponse(int64_t id, wire::Header& header, const c10::IValue& value) {
  if (id == 0) return;
  if (auto ctx = find(id)) attach(*ctx, header, &value);
}

c10::IValue Container::onReceive(const wire::Header& header, int from, c10::IValue value,
                                 bool request) {
  if (!header.hasAutograd) return value;
  if (from < 0 || from >= static_cast<int>(runtime_.workers().size())) {
    throw RpcError(ErrorCode::kBadMessage, "?", "distributed autograd from an unnamed peer");
  }
  std::shared_ptr<ContextState> ctx;
  if (request) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = contexts_[header.autogradContext];
    if (!slot) slot = std::make_shared<ContextState>(header.autogradContext);
    ctx = slot;
  } else {
    // A response to a call made in a context this worker has released since
    // (an rpcAsync whose scope ended first): it must not bring it back.
    ctx = find(header.autogradContext);
    if (!ctx) return value;
  }
  if (header.autogradSendId == 0) return value;
  size_t count = 0;
  forEachTensor(value, [&](const at::Tensor&) { ++count; });
  const auto& flags = header.requiresGrad;
  auto bad = [&](const std::string& why) {
    return RpcError(
        ErrorCode::kBadMessage, runtime_.workers()[from].name,
        "distributed autograd flags from worker '" + runtime_.workers()[from].name + "': " + why);
  };
  if (flags.size() != count) {
    throw bad(std::to_string(flags.size()) + " flags for " + std::to_string(count) + " tensors");
  }
  auto recv = std::make_shared<RecvFunction>(ctx->id(), from, header.autogradSendId, request);
  size_t i = 0;
  std::string error;
  c10::IValue out = mapTensors(value, [&](const at::Tensor& t) {
    if (!flags[i++]) return t;
    if (!t.defined() || !(t.is_floating_point() || t.is_complex())) {
      error = "a tensor of type " + std::string(t.defined() ? t.toString() : "undefined") +
              " cannot require grad";
      return t;
    }
    at::Tensor received = t.detach();
    uint32_t input = recv->add_input_metadata(received);
    torch::autograd::impl::set_gradient_edge(received, torch::autograd::Edge(recv, input));
    return received;
  });
  if (!error.empty()) throw bad(error);
  return out;
}

Future Container::propagate(const std::shared_ptr<ContextState>& ctx,
                            const torch::autograd::edge_list& roots,
                            torch::autograd::variable_list grads) {
  GraphEnds ends = scan(roots);
  torch::autograd::edge_list outputs;
  for (const auto& leaf : ends.leaves) outputs.emplace_back(leaf, 0);
  for (const auto& recv : ends.recvs) {
    for (uint32_t i = 0; i < recv->num_inputs(); ++i) outputs.emplace_back(recv, i);
  }
  if (outputs.empty()) return Future::fromValue(c10::IValue());
  // The graph is always kept: a part shared by several SendRecords runs once
  // per gradient message reaching it (by linearity the sums are the same).
  // The pass captures instead of accumulating: nothing lands in .grad.
  // On this thread (local_engine.h) unless RPCJOB_AUTOGRAD_ENGINE=libtorch.
  trace::point("autograd.engine", static_cast<uint64_t>(ctx->id()));
  std::vector<at::Tensor> captured;
  if (autogradEngine() == AutogradEngine::kThread) {
    std::string libtorchReason;
    captured = runLocalBackward(roots, std::move(grads), outputs, &libtorchReason);
    if (!libtorchReason.empty()) {
      trace::point("autograd.engine.libtorch", static_cast<uint64_t>(ctx->id()));
    }
  } else {
    captured = runLibtorchBackward(roots, std::move(grads), outputs);
  }
  trace::point("autograd.engine.done", static_cast<uint64_t>(ctx->id()));
  size_t k = 0;
  for (const auto& leaf : ends.leaves) {
    const at::Tensor& g = captured.at(k++);
    if (g.defined()) ctx->accumulate(leaf->variable, g);
  }
  std::vector<Future> sent;
  for (const auto& recv : ends.recvs) {
    std::vector<c10::IValue> gs;
    bool any = false;
    for (uint32_t i = 0; i < recv->num_inputs(); ++i) {
      const at::Tensor& g = captured.at(k++);
      any = any || g.defined();
      gs.push_back(g.defined() ? packGradient(g) : c10::IValue());
    }
    if (!any) continue;
    wire::Header h;
    h.type = wire::MessageType::kCall;
    h.function = kGradients;
    c10::IValue args = c10::ivalue::Tuple::create(
        {ctx->id(), recv->sendId(), c10::ivalue::Tuple::create(std::move(gs))});
    // Back the way the tensors came: the gradients of a call's arguments go to
    // the caller as its responses do (the inverse of its device map to us).
    sent.push_back(runtime_.sendRequest(recv->peerRank(), std::move(h), &args, {},
                                        /*inverseDeviceMap=*/recv->fromRequest()));
  }
  return whenAll(sent, /*failFast=*/true);
}

HelpQueue::Leftover Container::toPool() {
  return [this](HelpQueue::Task&& task) {
    // Left when the pass ended (a failure elsewhere, a timeout): it still
    // answers its caller, from the pool, or here when the pool is gone.
    HelpQueue::Task copy = task;
    if (!runtime_.pool()->submit(std::move(task))) copy();
  };
}

Future Container::gradientsCall(std::vector<c10::IValue> args) {
  auto done = detail::newFutureState(nullptr);
  if (args.size() != 3 || !args[0].isInt() || !args[1].isInt()) {
    throw std::invalid_argument("bad gradients call");
  }
  auto handoff = std::make_shared<StreamHandoff>(args[2]);
  const int64_t id = args[0].toInt();
  HelpQueue::Task task = [this, done, handoff, args = std::move(args)] {
    CurrentContextScope none(0);  // as on a pool thread, also on a waiting one
    try {
      handoff->waitOnCurrentStreams();
      Future downstream = onGradients(args[0].toInt(), args[1].toInt(), args[2]);
      downstream.addInlineCallback([done](const Future& f) {
        if (f.hasError()) {
          done->fail(f.error());
        } else {
          done->complete(c10::IValue());
        }
      });
    } catch (...) {
      done->fail(std::make_exception_ptr(
          std::runtime_error("backward failed: " + describe(std::current_exception()))));
    }
  };
  // A thread of this worker waiting in the context's backward runs it; else
  // the pool (a worker the pass only passes through).
  const std::shared_ptr<ContextState> ctx = find(id);
  if (ctx && ctx->help().offer(std::move(task))) return Future(done);
  if (!runtime_.pool()->submit(std::move(task))) {
    throw std::runtime_error("worker is shutting down");
  }
  return Future(done);
}

Future Container::onGradients(int64_t id, int64_t sendId, const c10::IValue& grads) {
  auto ctx = get(id);
  auto record = ctx->send(sendId);
  const std::string& self = runtime_.self().name;
  if (!record) {
    throw std::invalid_argument("no send " + std::to_string(sendId) + " in context " +
                                std::to_string(id) + " on worker '" + self + "'");
  }
  if (!grads.isTuple() || grads.toTupleRef().elements().size() != record->edges.size()) {
    throw std::invalid_argument("gradients do not match the tensors sent");
  }
  torch::autograd::variable_list gs;
  const auto& items = grads.toTupleRef().elements();
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].isNone()) {
      gs.emplace_back();
    } else {
      // Where the tensor was sent from (the forward's device map, reversed);
      // a no-op when the call's own map brought it there.
      gs.push_back(unpackGradient(items[i], record->devices[i]));
    }
  }
  return propagate(ctx, record->edges, std::move(gs));
}

std::vector<Builtin> Container::builtins() {
  std::vector<Builtin> out;
  out.push_back({kBuiltinAutogradContexts,
                 [this](const CallInfo&, std::vector<c10::IValue>) {
                   c10::List<int64_t> ids;
                   for (int64_t id : live()) ids.push_back(id);
                   return c10::IValue(ids);
                 },
                 nullptr, true});
  // Answers once everything downstream did, holding no thread meanwhile.
  out.push_back({kGradients, nullptr,
                 [this](const CallInfo&, std::vector<c10::IValue> args) {
                   return gradientsCall(std::move(args));
                 },
                 true});
  out.push_back({kRelease, nullptr,
                 [this](const CallInfo&, std::vector<c10::IValue> args) {
                   if (args.size() != 1 || !args[0].isInt()) {
                     throw std::invalid_argument("bad release call");
                   }
                   return release(args[0].toInt());
                 },
                 true});
  for (auto& b : optimizerBuiltins()) out.push_back(std::move(b));
  return out;
}

}  // namespace rpcjob::runtime::autograd
