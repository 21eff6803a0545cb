#pragma once
// The remote half of the GPU distributed autograd tests and of the recipe's
// experiment in the GPU bench: a linear layer on a device of the worker's
// choosing, trained through distributed autograd.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "rpcjob/runtime/dist_autograd.h"
#include "rpcjob/runtime/runtime.h"

namespace rpcjob::gpu {

// Deterministic leaves (weight [out, in], bias [out]) on `device`, made on the
// host so every process gets the same values.
inline std::pair<at::Tensor, at::Tensor> gpuLinearParams(int64_t in, int64_t out, int64_t seed,
                                                         const c10::Device& device) {
  at::Tensor w = at::arange(out * in, at::kFloat)
                     .mul(0.37)
                     .add(seed)
                     .sin()
                     .div(std::sqrt(static_cast<double>(in)))
                     .reshape({out, in});
  at::Tensor b = at::arange(out, at::kFloat).add(seed).cos().mul(0.1);
  return {w.to(device).detach().requires_grad_(true), b.to(device).detach().requires_grad_(true)};
}

inline void registerGpuAutogradFunctions(runtime::Runtime& rt) {
  using runtime::CallInfo;
  using Args = std::vector<c10::IValue>;
  struct Layer {
    std::mutex mu;
    at::Tensor w, b;
    bool cpuOut = false;  // "CPU RPC" mode: the activation goes back through host memory
  };
  auto layer = std::make_shared<Layer>();
  // (device, in, out, seed, cpuOut) -> None
  rt.registerFunction("gag.make", [layer](const CallInfo&, Args a) {
    auto [w, b] = gpuLinearParams(a.at(1).toInt(), a.at(2).toInt(), a.at(3).toInt(),
                                  c10::Device(a.at(0).toStringRef()));
    std::lock_guard<std::mutex> lock(layer->mu);
    layer->w = w;
    layer->b = b;
    layer->cpuOut = a.at(4).toBool();
    return c10::IValue();
  });
  // (x) -> the layer applied to x moved to its device (and, in CPU mode, to the host)
  rt.registerFunction("gag.forward", [layer](const CallInfo&, Args a) {
    at::Tensor w, b;
    bool cpuOut;
    {
      std::lock_guard<std::mutex> lock(layer->mu);
      w = layer->w;
      b = layer->b;
      cpuOut = layer->cpuOut;
    }
    at::Tensor y = at::tanh(at::addmm(b, a.at(0).toTensor().to(w.device()), w.t()));
    return c10::IValue(cpuOut ? y.cpu() : y);
  });
  // (index) -> the weight (0) or the bias (1): parameter RRefs
  rt.registerFunction("gag.param", [layer](const CallInfo&, Args a) {
    std::lock_guard<std::mutex> lock(layer->mu);
    return c10::IValue(a.at(0).toInt() == 0 ? layer->w : layer->b);
  });
  // (context) -> this worker's gradients of (w, b) there, on the host
  rt.registerFunction("gag.grads", [layer](const CallInfo& call, Args a) {
    at::Tensor w, b;
    {
      std::lock_guard<std::mutex> lock(layer->mu);
      w = layer->w;
      b = layer->b;
    }
    auto id = a.at(0).toInt();
    return c10::IValue(c10::ivalue::Tuple::create(
        {runtime::dist_autograd::gradientOf(call.runtime, id, w).cpu(),
         runtime::dist_autograd::gradientOf(call.runtime, id, b).cpu()}));
  });
  rt.registerFunction("gag.weights", [layer](const CallInfo&, Args) {
    std::lock_guard<std::mutex> lock(layer->mu);
    return c10::IValue(
        c10::ivalue::Tuple::create({layer->w.detach().cpu(), layer->b.detach().cpu()}));
  });
  // (x) -> 2 * the driver's layer applied to this layer's output: a call back
  // to the driver inside this one (the graph goes driver -> here -> driver).
  rt.registerFunction("gag.nested", [layer](const CallInfo& call, Args a) {
    at::Tensor w, b;
    {
      std::lock_guard<std::mutex> lock(layer->mu);
      w = layer->w;
      b = layer->b;
    }
    at::Tensor y = at::tanh(at::addmm(b, a.at(0).toTensor().to(w.device()), w.t()));
    return c10::IValue(call.runtime.rpcSync("driver", "gag.forward", {y}).toTensor().mul(2));
  });
  // (x) -> x * 3, whose backward throws here.
  rt.registerFunction("gag.throw_in_backward", [](const CallInfo& call, Args a) {
    at::Tensor y = a.at(0).toTensor().mul(3);
    std::string self = call.runtime.self().name;
    y.register_hook([self](const at::Tensor&) -> at::Tensor {
      throw std::runtime_error("boom in backward on " + self);
    });
    return c10::IValue(y);
  });
  // (x) -> x * 3, whose backward ends this process.
  rt.registerFunction("gag.exit_in_backward", [](const CallInfo&, Args a) {
    at::Tensor y = a.at(0).toTensor().mul(3);
    y.register_hook([](const at::Tensor& g) -> at::Tensor {
      std::_Exit(3);
      return g;
    });
    return c10::IValue(y);
  });
}

}  // namespace rpcjob::gpu
