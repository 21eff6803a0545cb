// rpcjob-model-split: the seeds' CUDA RPC recipe (cuda-rpc-recipe) in C++.
//
// Two workers. The master (rank 0) holds a linear layer (size x size, 1000 as in
// the recipe) and makes the other on the shard (rank 1) with remote() of the
// registered module class MyModule; it runs 10 forward and backward passes
// through both, with distributed autograd, and prints the recipe's line:
//
//   cpu RPC total execution time: 2.3145 Seconds
//   cuda RPC total execution time: 0.0687 Seconds
//
// "cpu": each side moves its activations to host memory before they travel (the
// recipe's comm_mode="cpu"). "cuda": they stay on the GPUs and the device map
// between the two workers (the planner's, from the manifest's GPUs) takes them
// GPU to GPU. cuda runs when this build of libtorch has CUDA and the assignment
// gives the master a GPU with a device map to the shard's.
//
// After each mode the master checks every gradient (its layer's and the
// shard's) against the same two layers run locally, and prints whether they
// match; a mismatch is exit code 3.
//
//   rpcjob-model-split [--size N] [--iterations N] [--mode cpu|cuda|both]
//
// Its metrics (rpcjob::telemetry) as rpcjob-worker's: /metrics when the job sets a
// port, and the final metrics file whose per-channel bytes `rpcjob run` prints.
//
// Exit codes: 0 done, 1 an RPC failed, 2 cannot start (not started by rpcjob),
// 3 gradients differ from the local run, 64 bad arguments.

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/runtime/dist_autograd.h"
#include "rpcjob/runtime/remote_object.h"
#include "rpcjob/runtime/runtime.h"
#include "rpcjob/telemetry/exporter.h"

namespace dist_autograd = rpcjob::runtime::dist_autograd;
using rpcjob::runtime::CallInfo;
using rpcjob::runtime::registerClass;
using rpcjob::runtime::RRef;
using rpcjob::runtime::Runtime;

namespace {

struct Options {
  int64_t size = 1000;
  int iterations = 10;
  std::string mode = "both";  // cpu, cuda, or both (cuda only where it can run)
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    try {
      if (arg == "--size") {
        o.size = std::stoll(value);
      } else if (arg == "--iterations") {
        o.iterations = std::stoi(value);
      } else if (arg == "--mode") {
        o.mode = value;
      } else {
        return false;
      }
    } catch (const std::exception&) {
      return false;
    }
  }
  return o.size > 0 && o.iterations > 0 &&
         (o.mode == "cpu" || o.mode == "cuda" || o.mode == "both");
}

// The recipe's MyModule: one linear layer on `device`; forward moves the input
// there (a no-op when it arrived there) and, in "cpu" mode, its output to host
// memory.
struct MyModule : torch::nn::Module {
  MyModule(at::Device device, bool cpuComm, int64_t size)
      : device(device),
        cpuComm(cpuComm),
        linear(register_module("linear", torch::nn::Linear(size, size))) {
    linear->to(device);
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = linear(x.to(device));
    return cpuComm ? y.cpu() : y;
  }
  at::Device device;
  bool cpuComm;
  torch::nn::Linear linear;
};

// Where this worker's layer lives: its first GPU when the assignment gives it
// one and libtorch can use it, else the CPU.
at::Device deviceOf(const rpcjob::WorkerEntry& entry) {
  if (entry.gpus.empty() || !at::hasCUDA()) return at::Device(at::kCPU);
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(entry.gpus.front()));
}

const rpcjob::WorkerEntry& entryOf(const rpcjob::Assignment& table, const std::string& name) {
  for (const auto& w : table.workers) {
    if (w.name == name) return w;
  }
  throw std::runtime_error("no worker " + name + " in the assignment");
}

// The recipe's torch.cuda.current_stream("cuda:0").synchronize(): the time
// covers the kernels, not their launches.
void synchronize(const at::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::VirtualGuardImpl impl(device.type());
  impl.getStream(device).synchronize();
}

// |a - b| within tolerance of b's scale (gradients of y.sum() grow with size).
bool close(const at::Tensor& a, const at::Tensor& b, double rtol, double* diff) {
  const double scale = b.abs().max().item<double>();
  *diff = (a - b).abs().max().item<double>();
  return *diff <= rtol * std::max(scale, 1.0);
}

struct Gradients {
  std::vector<at::Tensor> master;  // weight, bias of the master's layer
  std::vector<at::Tensor> shard;   // weight, bias of the remote module's
};

// Runs the recipe's measure(comm_mode); returns false when the gradients differ
// from the local run.
bool measure(Runtime& rt, const std::string& shard, const std::string& mode,
             const at::Device& device, const Options& o) {
  const bool cpuComm = mode == "cpu";
  // local module on the master's device; remote module on the shard's
  auto lm = std::make_shared<MyModule>(device, cpuComm, o.size);
  RRef rm = rt.remote(shard, "MyModule", {cpuComm, o.size});
  // prepare random inputs
  const at::Tensor x = at::randn({o.size, o.size}).to(device);

  Gradients grads;
  const auto tik = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iterations; ++i) {
    dist_autograd::Context ctx(rt);
    at::Tensor y = rm.rpcSync("forward", {lm->forward(x)}).toTensor();
    dist_autograd::backward(rt, ctx.id(), {y.sum()});
    if (i + 1 == o.iterations) {  // every pass computes the same gradients: keep the last
      grads.master = {dist_autograd::gradientOf(rt, ctx.id(), lm->linear->weight),
                      dist_autograd::gradientOf(rt, ctx.id(), lm->linear->bias)};
      const c10::IValue shardGrads = rm.rpcSync("gradients", {ctx.id()});
      for (const auto& g : shardGrads.toTupleRef().elements()) grads.shard.push_back(g.toTensor());
    }
  }
  synchronize(device);
  const auto tok = std::chrono::steady_clock::now();
  std::printf("%s RPC total execution time: %.6f Seconds\n", mode.c_str(),
              std::chrono::duration<double>(tok - tik).count());

  // The same two layers and input, on the CPU, with local autograd.
  const c10::IValue remoteParams = rm.rpcSync("parameters");
  const auto& remote = remoteParams.toTupleRef().elements();
  auto leaf = [](const at::Tensor& t) { return t.detach().cpu().clone().requires_grad_(); };
  const at::Tensor w1 = leaf(lm->linear->weight), b1 = leaf(lm->linear->bias);
  const at::Tensor w2 = leaf(remote.at(0).toTensor()), b2 = leaf(remote.at(1).toTensor());
  at::linear(at::linear(x.cpu(), w1, b1), w2, b2).sum().backward();

  // cuBLAS may sum in another order than the CPU.
  const double rtol = device.is_cuda() ? 1e-3 : 1e-4;
  const std::vector<std::pair<std::string, std::pair<at::Tensor, at::Tensor>>> pairs = {
      {"master weight", {grads.master.at(0), w1.grad()}},
      {"master bias", {grads.master.at(1), b1.grad()}},
      {"shard weight", {grads.shard.at(0), w2.grad()}},
      {"shard bias", {grads.shard.at(1), b2.grad()}}};
  bool ok = true;
  double worst = 0;
  for (const auto& [name, p] : pairs) {
    double diff = 0;
    if (!p.first.defined() || !close(p.first.cpu(), p.second, rtol, &diff)) {
      std::printf("%s RPC gradient of the %s differs from the local run (max abs diff %g)\n",
                  mode.c_str(), name.c_str(), p.first.defined() ? diff : -1.0);
      ok = false;
    }
    worst = std::max(worst, diff);
  }
  if (ok) {
    std::printf("%s RPC gradients match the local run (4 tensors, max abs diff %g)\n", mode.c_str(),
                worst);
  }
  std::fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::cerr << "usage: rpcjob-model-split [--size N] [--iterations N] [--mode cpu|cuda|both]\n";
    return 64;
  }
  // The metrics first: they outlive the runtime (declared before it, destroyed
  // after it) and write the metrics file `rpcjob run` sums per channel.
  std::unique_ptr<rpcjob::telemetry::Exporter> metrics;
  std::unique_ptr<Runtime> rt;
  rpcjob::Identity id;
  try {
    id = rpcjob::identityFromEnvironment();
    auto options = rpcjob::runtime::optionsFromAssignment(id.assignment, id.name);
    rpcjob::runtime::applyEnvironment(options);
    metrics = rpcjob::telemetry::fromEnvironment(id);
    metrics->attach(options);  // every channel's bytes, every call
    rt = std::make_unique<Runtime>(id.assignment, id.name, std::move(options));
  } catch (const std::exception& e) {
    std::cerr << "rpcjob-model-split: cannot start (run it with `rpcjob run model-split.yaml`): "
              << e.what() << "\n";
    return 2;
  }
  if (rt->workers().size() != 2) {
    std::cerr << "rpcjob-model-split: needs 2 workers, the job has " << rt->workers().size()
              << "\n";
    return 64;
  }
  const at::Device device = deviceOf(entryOf(id.assignment, id.name));

  // Every worker can own the remote module (the shard does).
  registerClass<MyModule>(*rt, "MyModule", {/*serializeCalls=*/true})
      .constructor([device](std::vector<c10::IValue> args) {
        return std::make_shared<MyModule>(device, args.at(0).toBool(), args.at(1).toInt());
      })
      .method("forward",
              [](MyModule& m, std::vector<c10::IValue> args) {
                return m.forward(args.at(0).toTensor());
              })
      // What the master needs for its check: this context's gradients here,
      // and the parameters, both in host memory.
      .method("gradients",
              [](MyModule& m, const CallInfo& call, std::vector<c10::IValue> args) {
                const auto ctx = args.at(0).toInt();
                auto grad = [&](const at::Tensor& p) {
                  at::Tensor g = dist_autograd::gradientOf(call.runtime, ctx, p);
                  if (!g.defined()) throw std::runtime_error("no gradient in this context");
                  return g.cpu();
                };
                return c10::ivalue::Tuple::create({grad(m.linear->weight), grad(m.linear->bias)});
              })
      .method("parameters", [](MyModule& m, std::vector<c10::IValue>) {
        return c10::ivalue::Tuple::create(
            {m.linear->weight.detach().cpu(), m.linear->bias.detach().cpu()});
      });

  int rc = 0;
  try {
    metrics->serve();  // /metrics, /healthz; /readyz once started
    rt->start();
    metrics->setReady();
    if (rt->self().rank == 0) {
      const std::string shard = rt->worker(1).name;
      std::printf("model split: 2 layers of %lldx%lld, %d iterations; master on %s, shard %s\n",
                  static_cast<long long>(o.size), static_cast<long long>(o.size), o.iterations,
                  device.str().c_str(), shard.c_str());
      std::vector<std::string> modes;
      if (o.mode != "cuda") modes.push_back("cpu");
      if (o.mode != "cpu") {
        // CUDA RPC needs a GPU here and the device map that takes it to the shard's.
        const auto maps = rpcjob::deviceMapsOf(id.assignment, id.name);
        const auto map = maps.find(shard);
        std::string why;
        if (!device.is_cuda()) {
          why = at::hasCUDA() ? "this worker has no GPU" : "this libtorch has no CUDA";
        } else if (map == maps.end() || !map->second.count(device.str())) {
          why = "no device map from " + device.str() + " to " + shard;
        }
        if (why.empty()) {
          modes.push_back("cuda");
        } else if (o.mode == "cuda") {
          std::cerr << "rpcjob-model-split: cannot run CUDA RPC: " << why << "\n";
          rc = 64;
        } else {
          std::printf("cuda RPC skipped: %s\n", why.c_str());
        }
      }
      std::fflush(stdout);
      for (const auto& mode : modes) {
        if (!measure(*rt, shard, mode, device, o)) rc = 3;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << rt->self().name << ": " << e.what() << "\n";
    rt->shutdown(rpcjob::runtime::ShutdownMode::kImmediate);
    return 1;
  }
  // Graceful: the shard serves until the master is done.
  rt->shutdown();
  return rc;
}
