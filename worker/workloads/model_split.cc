#include "model_split.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <torch/csrc/autograd/autograd.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>

#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/runtime/dist_autograd.h"

namespace rpcjob::worker {
namespace {

constexpr const char* kInit = "model_split.init";        // (weight, bias, requiresGrad) -> None
constexpr const char* kForward = "model_split.forward";  // (x) -> linear(x)
constexpr const char* kGrads = "model_split.grads";  // (context) -> (dweight, dbias) on the host

// This process's layer. One per worker; set by the master's init call.
struct Shard {
  std::mutex mutex;
  std::optional<at::Tensor> weight;
  std::optional<at::Tensor> bias;
};

Shard& shard() {
  static Shard s;
  return s;
}

}  // namespace

void placeModelSplit(const Assignment& assignment, const std::string& worker,
                     ModelSplitConfig& config) {
  const WorkerEntry* self = nullptr;
  for (const auto& w : assignment.workers) {
    if (w.name == worker) self = &w;
  }
  config.device = "cpu";
  config.mappedPeers.clear();
  if (self == nullptr || self->gpus.empty()) return;
  config.device = "cuda:" + std::to_string(self->gpus.front());
  for (const auto& [peer, map] : deviceMapsOf(assignment, worker)) {
    if (map.count(config.device)) config.mappedPeers.insert(peer);
  }
}

void registerModelSplit(runtime::Runtime& rt, const ModelSplitConfig& config) {
  const at::Device device(config.device);
  rt.registerFunction(kInit, [device](const runtime::CallInfo&, std::vector<c10::IValue> args) {
    // Arrived on this worker's GPU already when the master's device map sends it here.
    const bool requiresGrad = args.size() > 2 && args.at(2).toBool();
    at::Tensor weight = args.at(0).toTensor().to(device).detach().requires_grad_(requiresGrad);
    at::Tensor bias = args.at(1).toTensor().to(device).detach().requires_grad_(requiresGrad);
    std::lock_guard<std::mutex> lock(shard().mutex);
    shard().weight = weight;
    shard().bias = bias;
    return c10::IValue();
  });
  rt.registerFunction(kForward, [device](const runtime::CallInfo&, std::vector<c10::IValue> args) {
    at::Tensor weight, bias;
    {
      std::lock_guard<std::mutex> lock(shard().mutex);
      if (!shard().weight) throw std::runtime_error("model_split.forward before model_split.init");
      weight = *shard().weight;
      bias = *shard().bias;
    }
    const at::Tensor x = args.at(0).toTensor();
    // Answer on the device the input came on: no copies when the device map
    // brought it to this worker's GPU (the answer goes back by the inverse map).
    return c10::IValue(at::linear(x.to(device), weight, bias).to(x.device()));
  });
  rt.registerFunction(kGrads, [](const runtime::CallInfo& call, std::vector<c10::IValue> args) {
    at::Tensor weight, bias;
    {
      std::lock_guard<std::mutex> lock(shard().mutex);
      if (!shard().weight) throw std::runtime_error("model_split.grads before model_split.init");
      weight = *shard().weight;
      bias = *shard().bias;
    }
    const auto id = args.at(0).toInt();
    at::Tensor dw = runtime::dist_autograd::gradientOf(call.runtime, id, weight);
    at::Tensor db = runtime::dist_autograd::gradientOf(call.runtime, id, bias);
    if (!dw.defined() || !db.defined()) throw std::runtime_error("no gradients here");
    return c10::IValue(c10::ivalue::Tuple::create({dw.cpu(), db.cpu()}));
  });
}

ModelSplitResult runModelSplit(runtime::Runtime& rt, const ModelSplitConfig& config) {
  const auto& workers = rt.workers();  // by rank; workers[0] is this one
  const at::Device device(config.device);
  const int64_t n = config.size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));  // keeps activations O(1)
  std::vector<at::Tensor> weights, biases;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    weights.push_back((at::randn({n, n}) * scale).to(device));
    biases.push_back((at::randn({n}) * scale).to(device));
  }
  // A peer without a device map for our GPU gets (and returns) CPU tensors.
  auto forPeer = [&](const std::string& peer, const at::Tensor& t) {
    return config.mappedPeers.count(peer) ? t : t.to(at::kCPU);
  };
  for (std::size_t i = 1; i < workers.size(); ++i) {
    const std::string& peer = workers[i].name;
    rt.rpcSync(peer, kInit, {forPeer(peer, weights[i]), forPeer(peer, biases[i]), config.backward});
  }
  const at::Tensor x = at::randn({n, n}).to(device);
  at::Tensor w0 = weights[0].detach().requires_grad_(config.backward);
  at::Tensor b0 = biases[0].detach().requires_grad_(config.backward);

  at::Tensor y;
  std::vector<at::Tensor> grads;  // with backward: the last pass's, by layer (weight, bias)
  const auto start = std::chrono::steady_clock::now();
  for (int pass = 0; pass < config.iterations; ++pass) {
    std::optional<runtime::dist_autograd::Context> ctx;
    if (config.backward) ctx.emplace(rt);
    y = at::linear(x, w0, b0);
    for (std::size_t i = 1; i < workers.size(); ++i) {
      const std::string& peer = workers[i].name;
      // rpcSync's blocking wait holds the host until the answer's CUDA events
      // completed: the time below covers the computation, not only its launch.
      y = rt.rpcSync(peer, kForward, {forPeer(peer, y)}).toTensor().to(device);
    }
    if (!ctx) continue;
    runtime::dist_autograd::backward(rt, ctx->id(), {y.sum()});
    if (pass + 1 < config.iterations) continue;
    grads = {runtime::dist_autograd::gradientOf(rt, ctx->id(), w0),
             runtime::dist_autograd::gradientOf(rt, ctx->id(), b0)};
    for (std::size_t i = 1; i < workers.size(); ++i) {
      auto t = rt.rpcSync(workers[i].name, kGrads, {ctx->id()}).toTuple();
      grads.push_back(t->elements()[0].toTensor());
      grads.push_back(t->elements()[1].toTensor());
    }
  }
  const auto end = std::chrono::steady_clock::now();

  at::Tensor expected = x;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    expected = at::linear(expected, weights[i], biases[i]);
  }
  ModelSplitResult result;
  result.workers = static_cast<int>(workers.size());
  result.seconds = std::chrono::duration<double>(end - start).count();
  result.checksum = y.defined() ? y.sum().item<double>() : 0;
  // Layers on different GPUs may pick other GEMM kernels than the local run: a
  // looser tolerance on CUDA.
  const bool cuda = device.is_cuda();
  result.matchesLocal = y.defined() && at::allclose(y.detach(), expected.detach(),
                                                    cuda ? 1e-3 : 1e-4, cuda ? 1e-4 : 1e-5);
  if (config.backward) {
    std::vector<at::Tensor> params;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      params.push_back(weights[i].detach().requires_grad_(true));
      params.push_back(biases[i].detach().requires_grad_(true));
    }
    at::Tensor out = x;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      out = at::linear(out, params[2 * i], params[2 * i + 1]);
    }
    auto local = torch::autograd::grad({out.sum()}, params);
    result.gradientsMatch = grads.size() == local.size();
    for (std::size_t i = 0; result.gradientsMatch && i < local.size(); ++i) {
      result.gradientsMatch =
          grads[i].defined() &&
          at::allclose(grads[i].cpu(), local[i].cpu(), cuda ? 1e-3 : 1e-4, cuda ? 1e-3 : 1e-4);
    }
  }
  return result;
}

std::string toText(const ModelSplitResult& r, const ModelSplitConfig& config) {
  char text[640];
  std::snprintf(text, sizeof text,
                "model-split: %d forward %spasses through %d layers (%dx%d, batch %d) on %d "
                "workers (%s%s) in %.3f s (%.2f ms/pass); checksum %.6f; matches local: %s%s",
                config.iterations, config.backward ? "and backward " : "", r.workers, config.size,
                config.size, config.size, r.workers, config.device.c_str(),
                config.mappedPeers.empty() ? "" : ", device maps to the peers' GPUs", r.seconds,
                config.iterations ? 1e3 * r.seconds / config.iterations : 0.0, r.checksum,
                r.matchesLocal ? "yes" : "NO",
                !config.backward   ? ""
                : r.gradientsMatch ? "; gradients match local: yes"
                                   : "; gradients match local: NO");
  return text;
}

}  // namespace rpcjob::worker
