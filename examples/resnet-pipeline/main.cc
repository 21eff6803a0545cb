// rpcjob-resnet-pipeline: the seeds' distributed pipeline parallelism tutorial
// (rpc-pipeline-parallelism-tutorial) in C++.
//
// Three workers: the master (rank 0) and two shards (ranks 1 and 2). ResNet50,
// made of torchvision's Bottleneck blocks, is cut in two as the tutorial cuts
// it: shard 1 holds the stem, layer1 and layer2; shard 2 layer3, layer4, the
// pooling and the fully connected layer. The master splits each batch into
// micro-batches and pipelines them through the shards with RRef proxies: shard
// 1's remote().forward(x_rref) gives an RRef that shard 2's rpc_async().forward
// takes, so shard 1 works on micro-batch i+1 while shard 2 works on i. MSE loss
// against one-hot labels, distributed backward, DistributedOptimizer (SGD, lr
// 0.05). For each num_split it prints, as the tutorial does:
//
//   number of splits = 1, execution time = 12.3456
//
// On GPUs (the assignment gives the shards GPUs) each shard's layers live on its
// GPU and shard 1's activations stay there: shard 2 fetches them GPU to GPU
// through the device map between the two (the tutorial moves them to the CPU).
//
//   rpcjob-resnet-pipeline [--batch 120] [--image 128] [--batches 3]
//       [--width 64] [--classes 1000] [--splits 1,2,4,8]
//
// --width is the planes of the first stage (64 in ResNet50); a small width,
// image and batch keep a CPU run short. As in the tutorial's code
// (xs.split(num_split)), num_split is the number of images per micro-batch.
//
// Its metrics (rpcjob::telemetry) as rpcjob-worker's: /metrics when the job sets a
// port, and the final metrics file whose per-channel bytes `rpcjob run` prints.
//
// Exit codes: 0 done, 1 an RPC failed, 2 cannot start (not started by rpcjob),
// 3 the optimizer left a watched parameter unchanged, 64 bad arguments.

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/runtime/dist_autograd.h"
#include "rpcjob/runtime/dist_optimizer.h"
#include "rpcjob/runtime/remote_object.h"
#include "rpcjob/runtime/runtime.h"
#include "rpcjob/telemetry/exporter.h"

namespace dist_autograd = rpcjob::runtime::dist_autograd;
namespace nn = torch::nn;
using rpcjob::runtime::DistributedOptimizer;
using rpcjob::runtime::Future;
using rpcjob::runtime::registerClass;
using rpcjob::runtime::RRef;
using rpcjob::runtime::Runtime;

namespace {

struct Options {
  int64_t batch = 120;
  int64_t image = 128;
  int batches = 3;
  int64_t width = 64;
  int64_t classes = 1000;
  std::vector<int64_t> splits = {1, 2, 4, 8};
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    try {
      if (arg == "--batch") {
        o.batch = std::stoll(value);
      } else if (arg == "--image") {
        o.image = std::stoll(value);
      } else if (arg == "--batches") {
        o.batches = std::stoi(value);
      } else if (arg == "--width") {
        o.width = std::stoll(value);
      } else if (arg == "--classes") {
        o.classes = std::stoll(value);
      } else if (arg == "--splits") {
        o.splits.clear();
        std::stringstream in(value);
        for (std::string s; std::getline(in, s, ',');) o.splits.push_back(std::stoll(s));
      } else {
        return false;
      }
    } catch (const std::exception&) {
      return false;
    }
  }
  bool ok = o.batch > 0 && o.image >= 32 && o.batches > 0 && o.width > 0 && o.classes > 0 &&
            !o.splits.empty();
  for (auto s : o.splits) ok = ok && s > 0;
  return ok;
}

// torchvision's Bottleneck (expansion 4, groups 1, base width 64).
struct BottleneckImpl : nn::Module {
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride, nn::Sequential downsample)
      : conv1(register_module("conv1", conv(inplanes, planes, 1, 1, 0))),
        bn1(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2(register_module("conv2", conv(planes, planes, 3, stride, 1))),
        bn2(register_module("bn2", nn::BatchNorm2d(planes))),
        conv3(register_module("conv3", conv(planes, planes * kExpansion, 1, 1, 0))),
        bn3(register_module("bn3", nn::BatchNorm2d(planes * kExpansion))),
        downsample(downsample ? register_module("downsample", downsample) : nullptr) {}

  static nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
    return nn::Conv2d(
        nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = torch::relu(bn1(conv1(x)));
    out = torch::relu(bn2(conv2(out)));
    out = bn3(conv3(out));
    return torch::relu(out + (downsample ? downsample->forward(x) : x));
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Conv2d conv3;
  nn::BatchNorm2d bn3;
  nn::Sequential downsample;
};
TORCH_MODULE(Bottleneck);

// A stage of blocks: a Sequential with a plain forward, so that it can sit in
// another Sequential (libtorch's own cannot).
struct StageImpl : nn::SequentialImpl {
  at::Tensor forward(const at::Tensor& x) { return nn::SequentialImpl::forward(x); }
};
TORCH_MODULE(Stage);

// The tutorial's ResNetBase: _make_layer.
struct ResNetBase : nn::Module {
  ResNetBase(at::Device device, int64_t inplanes) : device(device), inplanes(inplanes) {}

  Stage makeLayer(int64_t planes, int blocks, int64_t stride = 1) {
    nn::Sequential downsample{nullptr};
    if (stride != 1 || inplanes != planes * BottleneckImpl::kExpansion) {
      downsample = nn::Sequential(
          BottleneckImpl::conv(inplanes, planes * BottleneckImpl::kExpansion, 1, stride, 0),
          nn::BatchNorm2d(planes * BottleneckImpl::kExpansion));
    }
    Stage layers;
    layers->push_back(Bottleneck(inplanes, planes, stride, downsample));
    inplanes = planes * BottleneckImpl::kExpansion;
    for (int i = 1; i < blocks; ++i) {
      layers->push_back(Bottleneck(inplanes, planes, 1, nn::Sequential{nullptr}));
    }
    return layers;
  }

  at::Device device;
  int64_t inplanes;
};

// The stem, layer1 and layer2 (the tutorial's ResNetShard1, with its init).
struct ResNetShard1 : ResNetBase {
  ResNetShard1(at::Device device, int64_t width, bool keepOnDevice)
      : ResNetBase(device, width), keepOnDevice(keepOnDevice) {
    // One push_back at a time: makeLayer() advances inplanes, and the arguments
    // of one call are evaluated in no fixed order.
    seq = register_module("seq", nn::Sequential());
    seq->push_back(nn::Conv2d(nn::Conv2dOptions(3, inplanes, 7).stride(2).padding(3).bias(false)));
    seq->push_back(nn::BatchNorm2d(inplanes));
    seq->push_back(nn::ReLU(nn::ReLUOptions(true)));
    seq->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
    seq->push_back(makeLayer(width, 3));
    seq->push_back(makeLayer(2 * width, 4, 2));
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
      } else if (auto* b = m->as<nn::BatchNorm2d>()) {
        nn::init::constant_(b->weight, 1);
        nn::init::constant_(b->bias, 0);
      }
    }
    to(device);
  }

  // x_rref.to_here().to(self.device); the tutorial returns out.cpu(), we keep
  // it on the GPU when shard 2 can fetch it through a device map.
  at::Tensor forward(const RRef& x) {
    at::Tensor out = seq->forward(x.toHere().toTensor().to(device));
    return keepOnDevice ? out : out.cpu();
  }

  bool keepOnDevice;
  nn::Sequential seq{nullptr};
};

// layer3, layer4, pooling and the fully connected layer (ResNetShard2).
struct ResNetShard2 : ResNetBase {
  ResNetShard2(at::Device device, int64_t width, int64_t classes)
      : ResNetBase(device, 2 * width * BottleneckImpl::kExpansion) {
    seq = register_module("seq", nn::Sequential());
    seq->push_back(makeLayer(4 * width, 6, 2));
    seq->push_back(makeLayer(8 * width, 3, 2));
    seq->push_back(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})));
    fc = register_module("fc", nn::Linear(8 * width * BottleneckImpl::kExpansion, classes));
    to(device);
  }

  // The output goes to the master, whose loss is on the CPU.
  at::Tensor forward(const RRef& x) {
    at::Tensor in = x.toHere().toTensor().to(device);
    return fc(torch::flatten(seq->forward(in), 1)).cpu();
  }

  nn::Sequential seq{nullptr};
  nn::Linear fc{nullptr};
};

// A copy on the CPU of a module's parameter `index` (negative: from the end),
// for a caller without a GPU.
at::Tensor parameterOnCpu(nn::Module& m, int64_t index) {
  const std::vector<at::Tensor> params = m.parameters();
  const auto n = static_cast<int64_t>(params.size());
  if (index < -n || index >= n) {
    throw std::out_of_range("parameter " + std::to_string(index) + " of " + std::to_string(n));
  }
  return params[static_cast<std::size_t>(index < 0 ? n + index : index)].detach().cpu();
}

// The tutorial's DistResNet50: the shards on the two workers, the pipeline in
// forward.
struct DistResNet50 {
  DistResNet50(Runtime& rt, int64_t numSplit, const std::vector<std::string>& workers,
               const Options& o, bool gpuActivations)
      : rt(rt),
        numSplit(numSplit),
        p1(rt.remote(workers.at(0), "ResNetShard1", {o.width, gpuActivations})),
        p2(rt.remote(workers.at(1), "ResNetShard2", {o.width, o.classes})) {}

  at::Tensor forward(const at::Tensor& xs) {
    std::vector<Future> outFutures;
    for (const at::Tensor& x : xs.split(numSplit, 0)) {
      RRef xRRef = rt.makeRRef(x);
      RRef yRRef = p1.remote("forward", {xRRef.toIValue()});
      outFutures.push_back(p2.rpcAsync("forward", {yRRef.toIValue()}));
    }
    std::vector<at::Tensor> outs;
    for (const auto& v : rpcjob::runtime::waitAll(outFutures)) outs.push_back(v.toTensor());
    return torch::cat(outs);
  }

  std::vector<RRef> parameterRRefs() {
    std::vector<RRef> params;
    for (RRef* shard : {&p1, &p2}) {
      const c10::IValue list = shard->rpcSync("parameter_rrefs");  // outlives the loop
      for (const auto& p : list.toListRef()) {
        params.push_back(RRef::fromIValue(p));
      }
    }
    return params;
  }

  Runtime& rt;
  int64_t numSplit;
  RRef p1;
  RRef p2;
};

// The tutorial's run_master; returns how many of shard 1's first parameter and
// shard 2's last one the optimizer left unchanged (0 when training works).
int runMaster(Runtime& rt, int64_t numSplit, const std::vector<std::string>& workers,
              const Options& o, bool gpuActivations) {
  // RPCJOB_EXAMPLE_PHASES=1: where each num_split's time goes, on stderr (every
  // phase ends on the master's CPU, so timing it adds no synchronization).
  const bool phases = std::getenv("RPCJOB_EXAMPLE_PHASES") != nullptr;
  auto mark = std::chrono::steady_clock::now();
  const auto lap = [&] {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - mark).count();
    mark = now;
    return s;
  };
  DistResNet50 model(rt, numSplit, workers, o, gpuActivations);
  const std::vector<RRef> params = model.parameterRRefs();
  // Shard 1's first parameter and shard 2's last, copied to the CPU by their
  // owners: the master has no GPU, so it cannot receive them where they live.
  const auto watched = [&] {
    return std::vector<at::Tensor>{model.p1.rpcSync("parameter_cpu", {int64_t{0}}).toTensor(),
                                   model.p2.rpcSync("parameter_cpu", {int64_t{-1}}).toTensor()};
  };
  const std::vector<at::Tensor> before = watched();
  DistributedOptimizer opt(rt, params, torch::optim::SGDOptions(0.05));
  if (phases)
    std::fprintf(stderr, "phases split=%lld setup=%.4f\n", static_cast<long long>(numSplit), lap());

  const at::Tensor oneHotIndices = torch::randint(0, o.classes, {o.batch, 1}, torch::kLong);
  for (int i = 0; i < o.batches; ++i) {
    std::printf("Processing batch %d\n", i);
    std::fflush(stdout);
    // generate random inputs and labels
    const at::Tensor inputs = torch::randn({o.batch, 3, o.image, o.image});
    const at::Tensor labels = torch::zeros({o.batch, o.classes}).scatter_(1, oneHotIndices, 1);
    dist_autograd::Context ctx(rt);
    lap();
    const at::Tensor outputs = model.forward(inputs);
    const double forward = lap();
    dist_autograd::backward(rt, ctx.id(), {torch::mse_loss(outputs, labels)});
    const double backward = lap();
    opt.step(ctx.id());
    if (phases) {
      std::fprintf(stderr, "phases split=%lld batch=%d forward=%.4f backward=%.4f step=%.4f\n",
                   static_cast<long long>(numSplit), i, forward, backward, lap());
    }
  }
  int unchanged = 0;
  const std::vector<at::Tensor> after = watched();
  for (std::size_t i = 0; i < after.size(); ++i) {
    if (at::equal(after[i], before[i])) ++unchanged;
  }
  return unchanged;
}

at::Device deviceOf(const rpcjob::Assignment& table, const std::string& name) {
  for (const auto& w : table.workers) {
    if (w.name == name && !w.gpus.empty() && at::hasCUDA()) {
      return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(w.gpus.front()));
    }
  }
  return at::Device(at::kCPU);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::cerr << "usage: rpcjob-resnet-pipeline [--batch N] [--image N (>= 32)] [--batches N] "
                 "[--width N] [--classes N] [--splits N,N,...]\n";
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
    std::cerr
        << "rpcjob-resnet-pipeline: cannot start (run it with `rpcjob run resnet-pipeline.yaml`): "
        << e.what() << "\n";
    return 2;
  }
  if (rt->workers().size() != 3) {
    std::cerr << "rpcjob-resnet-pipeline: needs 3 workers (master, 2 shards), the job has "
              << rt->workers().size() << "\n";
    return 64;
  }
  const at::Device device = deviceOf(id.assignment, id.name);

  // serializeCalls: the tutorial's self._lock around each shard's forward.
  registerClass<ResNetShard1>(*rt, "ResNetShard1", {/*serializeCalls=*/true})
      .constructor([device](std::vector<c10::IValue> args) {
        return std::make_shared<ResNetShard1>(device, args.at(0).toInt(), args.at(1).toBool());
      })
      .method("forward",
              [](ResNetShard1& s, std::vector<c10::IValue> args) {
                return s.forward(RRef::fromIValue(args.at(0)));
              })
      .method("parameter_cpu", [](ResNetShard1& s, std::vector<c10::IValue> args) {
        return parameterOnCpu(s, args.at(0).toInt());
      });
  registerClass<ResNetShard2>(*rt, "ResNetShard2", {/*serializeCalls=*/true})
      .constructor([device](std::vector<c10::IValue> args) {
        return std::make_shared<ResNetShard2>(device, args.at(0).toInt(), args.at(1).toInt());
      })
      .method("forward",
              [](ResNetShard2& s, std::vector<c10::IValue> args) {
                return s.forward(RRef::fromIValue(args.at(0)));
              })
      .method("parameter_cpu", [](ResNetShard2& s, std::vector<c10::IValue> args) {
        return parameterOnCpu(s, args.at(0).toInt());
      });

  int rc = 0;
  try {
    metrics->serve();  // /metrics, /healthz; /readyz once started
    rt->start();
    metrics->setReady();
    if (rt->self().rank == 0) {
      const std::vector<std::string> workers = {rt->worker(1).name, rt->worker(2).name};
      // Shard 1's activations stay on its GPU when shard 2 has a device map to
      // it (shard 2 fetches them; the answer comes by the map's inverse).
      const at::Device d1 = deviceOf(id.assignment, workers[0]);
      const auto maps = rpcjob::deviceMapsOf(id.assignment, workers[1]);
      const auto map = maps.find(workers[0]);
      const bool gpuActivations = d1.is_cuda() && map != maps.end() && !map->second.empty();
      std::printf(
          "ResNet50 pipeline: batch %lld of 3x%lldx%lld, %d batches, width %lld, %lld classes; "
          "shards %s (%s) and %s (%s); activations between shards on %s\n",
          static_cast<long long>(o.batch), static_cast<long long>(o.image),
          static_cast<long long>(o.image), o.batches, static_cast<long long>(o.width),
          static_cast<long long>(o.classes), workers[0].c_str(), d1.str().c_str(),
          workers[1].c_str(), deviceOf(id.assignment, workers[1]).str().c_str(),
          gpuActivations ? "the GPUs (device maps)" : "the CPU");
      std::fflush(stdout);
      for (const int64_t numSplit : o.splits) {
        const auto tik = std::chrono::steady_clock::now();
        const int unchanged = runMaster(*rt, numSplit, workers, o, gpuActivations);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - tik).count();
        std::printf("number of splits = %lld, execution time = %.6f (%.1f images/s)\n",
                    static_cast<long long>(numSplit), seconds,
                    static_cast<double>(o.batch * o.batches) / seconds);
        if (unchanged != 0) {
          std::printf(
              "number of splits = %lld: %d of 2 watched parameters unchanged by the "
              "optimizer\n",
              static_cast<long long>(numSplit), unchanged);
          rc = 3;
        }
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::cerr << rt->self().name << ": " << e.what() << "\n";
    rt->shutdown(rpcjob::runtime::ShutdownMode::kImmediate);
    return 1;
  }
  rt->shutdown();
  return rc;
}
