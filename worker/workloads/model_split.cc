#include "model_split.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>

namespace rpcjob::worker {
namespace {

constexpr const char* kInit = "model_split.init";        // (weight, bias) -> None
constexpr const char* kForward = "model_split.forward";  // (x) -> linear(x)

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

void registerModelSplit(runtime::Runtime& rt) {
  rt.registerFunction(kInit, [](const runtime::CallInfo&, std::vector<c10::IValue> args) {
    std::lock_guard<std::mutex> lock(shard().mutex);
    shard().weight = args.at(0).toTensor();
    shard().bias = args.at(1).toTensor();
    return c10::IValue();
  });
  rt.registerFunction(kForward, [](const runtime::CallInfo&, std::vector<c10::IValue> args) {
    at::Tensor weight, bias;
    {
      std::lock_guard<std::mutex> lock(shard().mutex);
      if (!shard().weight) throw std::runtime_error("model_split.forward before model_split.init");
      weight = *shard().weight;
      bias = *shard().bias;
    }
    return c10::IValue(at::linear(args.at(0).toTensor(), weight, bias));
  });
}

ModelSplitResult runModelSplit(runtime::Runtime& rt, const ModelSplitConfig& config) {
  const auto& workers = rt.workers();  // by rank; workers[0] is this one
  const int64_t n = config.size;
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));  // keeps activations O(1)
  std::vector<at::Tensor> weights, biases;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    weights.push_back(at::randn({n, n}) * scale);
    biases.push_back(at::randn({n}) * scale);
  }
  for (std::size_t i = 1; i < workers.size(); ++i) {
    rt.rpcSync(workers[i].name, kInit, {weights[i], biases[i]});
  }
  const at::Tensor x = at::randn({n, n});

  at::Tensor y;
  const auto start = std::chrono::steady_clock::now();
  for (int pass = 0; pass < config.iterations; ++pass) {
    y = at::linear(x, weights[0], biases[0]);
    for (std::size_t i = 1; i < workers.size(); ++i) {
      y = rt.rpcSync(workers[i].name, kForward, {y}).toTensor();
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
  result.matchesLocal = y.defined() && at::allclose(y, expected, 1e-4, 1e-5);
  return result;
}

std::string toText(const ModelSplitResult& r, const ModelSplitConfig& config) {
  char text[512];
  std::snprintf(text, sizeof text,
                "model-split: %d forward passes through %d layers (%dx%d, batch %d) on %d workers "
                "in %.3f s (%.2f ms/pass); checksum %.6f; matches local: %s",
                config.iterations, r.workers, config.size, config.size, config.size, r.workers,
                r.seconds, config.iterations ? 1e3 * r.seconds / config.iterations : 0.0,
                r.checksum, r.matchesLocal ? "yes" : "NO");
  return text;
}

}  // namespace rpcjob::worker
