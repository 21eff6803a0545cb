#include "autograd_functions.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "rpcjob/runtime/dist_autograd.h"

namespace rpcjob::testing {
namespace {

using runtime::CallInfo;
using Args = std::vector<c10::IValue>;

std::mutex linearsMu;
std::map<std::string, std::pair<at::Tensor, at::Tensor>> linears;

}  // namespace

std::pair<at::Tensor, at::Tensor> localLinear(const std::string& name) {
  std::lock_guard<std::mutex> lock(linearsMu);
  auto it = linears.find(name);
  if (it == linears.end()) throw std::invalid_argument("no linear '" + name + "'");
  return it->second;
}

namespace {

std::pair<at::Tensor, at::Tensor> linear(const std::string& name) {
  return localLinear(name);
}

c10::IValue orNone(const at::Tensor& t) {
  return t.defined() ? c10::IValue(t) : c10::IValue();
}

}  // namespace

std::pair<at::Tensor, at::Tensor> linearParams(int64_t in, int64_t out, int64_t seed) {
  at::Tensor w = (at::arange(out * in, at::kFloat).mul(0.37).add(seed).sin().div(std::sqrt(in)))
                     .reshape({out, in});
  at::Tensor b = at::arange(out, at::kFloat).add(seed).cos().mul(0.1);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  return {w, b};
}

at::Tensor linearForward(const at::Tensor& w, const at::Tensor& b, const at::Tensor& x) {
  return at::tanh(at::addmm(b, x, w.t()));
}

void registerAutogradTestFunctions(runtime::Runtime& rt) {
  // (name, in, out, seed) -> None
  rt.registerFunction("ag.make_linear", [](const CallInfo&, Args args) {
    auto params = linearParams(args.at(1).toInt(), args.at(2).toInt(), args.at(3).toInt());
    std::lock_guard<std::mutex> lock(linearsMu);
    linears[args.at(0).toStringRef()] = params;
    return c10::IValue();
  });
  // (name, x) -> tanh(x W^T + b)
  rt.registerFunction("ag.linear", [](const CallInfo&, Args args) {
    auto [w, b] = linear(args.at(0).toStringRef());
    return c10::IValue(linearForward(w, b, args.at(1).toTensor()));
  });
  // (name, index) -> the weight (0) or bias (1) itself: for parameter RRefs.
  rt.registerFunction("ag.param", [](const CallInfo&, Args args) {
    auto p = linear(args.at(0).toStringRef());
    return c10::IValue(args.at(1).toInt() == 0 ? p.first : p.second);
  });
  // (name) -> (W, b) detached copies.
  rt.registerFunction("ag.weights", [](const CallInfo&, Args args) {
    auto [w, b] = linear(args.at(0).toStringRef());
    return c10::IValue(c10::ivalue::Tuple::create({w.detach().clone(), b.detach().clone()}));
  });
  // (context, name) -> this worker's gradients of (W, b) in the context (None: none).
  rt.registerFunction("ag.gradients", [](const CallInfo& call, Args args) {
    auto [w, b] = linear(args.at(1).toStringRef());
    auto id = args.at(0).toInt();
    return c10::IValue(c10::ivalue::Tuple::create(
        {orNone(runtime::dist_autograd::gradientOf(call.runtime, id, w)),
         orNone(runtime::dist_autograd::gradientOf(call.runtime, id, b))}));
  });
  // (x, route): route is (worker, linear, worker, linear, ...) starting with this
  // worker; applies this worker's linear and hands the result to the next worker
  // with a nested call: x -> A -> B -> C ... and the results back the same way.
  rt.registerFunction("ag.pipe", [](const CallInfo& call, Args args) {
    const auto& route = args.at(1).toTupleRef().elements();
    auto [w, b] = linear(route.at(1).toStringRef());
    at::Tensor y = linearForward(w, b, args.at(0).toTensor());
    if (route.size() <= 2) return c10::IValue(y);
    std::vector<c10::IValue> rest(route.begin() + 2, route.end());
    at::Tensor z =
        call.runtime
            .rpcSync(rest[0].toStringRef(), "ag.pipe", {y, c10::ivalue::Tuple::create(rest)})
            .toTensor();
    return c10::IValue(z.mul(2));
  });
  // (x) -> x * 3, whose backward throws on this worker.
  rt.registerFunction("ag.throw_in_backward", [](const CallInfo& call, Args args) {
    at::Tensor y = args.at(0).toTensor().mul(3);
    std::string self = call.runtime.self().name;
    y.register_hook([self](const at::Tensor&) -> at::Tensor {
      throw std::runtime_error("boom in backward on " + self);
    });
    return c10::IValue(y);
  });
  // (x, ms) -> x * 3, whose backward sleeps `ms` on this worker.
  rt.registerFunction("ag.sleep_in_backward", [](const CallInfo&, Args args) {
    at::Tensor y = args.at(0).toTensor().mul(3);
    int64_t ms = args.at(1).toInt();
    y.register_hook([ms](const at::Tensor& g) -> at::Tensor {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return g;
    });
    return c10::IValue(y);
  });
  // (x) -> x * 3, whose backward kills this worker's process.
  rt.registerFunction("ag.exit_in_backward", [](const CallInfo&, Args args) {
    at::Tensor y = args.at(0).toTensor().mul(3);
    y.register_hook([](const at::Tensor& g) -> at::Tensor {
      std::_Exit(3);
      return g;
    });
    return c10::IValue(y);
  });
}

}  // namespace rpcjob::testing
