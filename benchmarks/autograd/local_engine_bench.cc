// rpcjob-autograd-bench: one worker's backward pass as the CUDA RPC recipe's
// shard runs it (the gradient of a linear layer's output, captured at its
// weight, bias and input), on the calling thread (runLocalBackward) beside
// libtorch's engine with the same arguments (the anchor), alternating rounds so
// both see the same machine. Host time per pass; on CUDA the device is drained
// between passes (untimed), so each pass starts as the worker's does.
//   rpcjob-autograd-bench [--device cpu|cuda] [--size N] [--passes N] [--rounds N] [--json]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/local_engine.h"

namespace {

namespace ta = torch::autograd;
using rpcjob::runtime::autograd::runLibtorchBackward;
using rpcjob::runtime::autograd::runLocalBackward;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int usage() {
  std::fprintf(stderr,
               "usage: rpcjob-autograd-bench [--device cpu|cuda] [--size N] [--passes N] "
               "[--rounds N] [--json]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu";
  int64_t size = 1000;
  int passes = 200;
  int rounds = 5;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool hasValue = i + 1 < argc;
    if (a == "--device" && hasValue) {
      device = argv[++i];
    } else if (a == "--size" && hasValue) {
      size = std::atoll(argv[++i]);
    } else if (a == "--passes" && hasValue) {
      passes = std::atoi(argv[++i]);
    } else if (a == "--rounds" && hasValue) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else {
      return usage();
    }
  }
  if ((device != "cpu" && device != "cuda") || size < 1 || passes < 1 || rounds < 1) {
    return usage();
  }
  if (device == "cuda" && !at::hasCUDA()) {
    std::fprintf(stderr, "rpcjob-autograd-bench: no CUDA device\n");
    return 1;
  }
  const c10::Device dev = device == "cuda" ? c10::Device(c10::DeviceType::CUDA, 0) : c10::kCPU;
  auto opts = at::TensorOptions().device(dev);
  // The shard: y = linear(x) with x received (a leaf here), y's gradient the
  // expanded one of the driver's y.sum().
  at::Tensor x = at::randn({size, size}, opts).requires_grad_();
  at::Tensor w = at::randn({size, size}, opts).requires_grad_();
  at::Tensor b = at::randn({size}, opts).requires_grad_();
  at::Tensor y = at::linear(x, w, b);
  ta::edge_list roots{ta::impl::gradient_edge(y)};
  ta::edge_list outputs{ta::impl::gradient_edge(w), ta::impl::gradient_edge(b),
                        ta::impl::gradient_edge(x)};
  at::Tensor grad = at::ones({}, opts).expand({size, size});
  auto drain = [&] {
    if (dev.is_cuda()) c10::impl::VirtualGuardImpl(dev.type()).getStream(dev).synchronize();
  };
  auto pass = [&](bool local) {
    drain();
    auto start = std::chrono::steady_clock::now();
    auto g = local ? runLocalBackward(roots, {grad}, outputs)
                   : runLibtorchBackward(roots, {grad}, outputs);
    double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (g.size() != 3 || !g[0].defined() || !g[2].defined()) {
      std::fprintf(stderr, "rpcjob-autograd-bench: a pass captured nothing\n");
      std::exit(1);
    }
    return us;
  };
  // Warm-up: libtorch's device threads, the allocator, the kernels.
  for (int i = 0; i < 20; ++i) pass(i % 2 == 0);
  std::vector<double> local, libtorch;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < passes; ++i) local.push_back(pass(true));
    for (int i = 0; i < passes; ++i) libtorch.push_back(pass(false));
  }
  drain();
  if (json) {
    std::printf(
        "{\"device\": \"%s\", \"size\": %lld, \"passes\": %zu, \"thread_pass_p50_us\": %.2f, "
        "\"libtorch_pass_p50_us\": %.2f, \"intra_op_threads\": %d}\n",
        device.c_str(), static_cast<long long>(size), local.size(), median(local), median(libtorch),
        at::get_num_threads());
  } else {
    std::printf("backward pass of a %lldx%lld linear on %s, %zu passes each (p50, host us)\n",
                static_cast<long long>(size), static_cast<long long>(size), device.c_str(),
                local.size());
    std::printf("  on the calling thread (rpcjob): %10.2f\n", median(local));
    std::printf("  libtorch's engine:              %10.2f\n", median(libtorch));
  }
  return 0;
}
