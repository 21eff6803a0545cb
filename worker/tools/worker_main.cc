// rpcjob-worker: one RPC worker process. Identity from the environment
// (RPCJOB_ASSIGNMENT or RPCJOB_PEERS, and RPCJOB_WORKER_NAME or RPCJOB_RANK).
//
//   rpcjob-worker serve [--deadline-s N]   serve calls until every worker shuts down
//   rpcjob-worker bench [--json] [--no-large] [--quick] [--ordered] [--channels a,b|auto]
//                                            rank 0 drives: every pair of workers, over
//                                            every CPU channel (tools/pair_bench.h)
//   rpcjob-worker bench --metrics-overhead N [--recorders observer,channels,transports]
//                       [--slice CALLS]      rank 0 against rank 1: small calls with the
//                                            metrics recorders (all, or those listed)
//                                            paused and running, N rounds, switching
//                                            every CALLS sync calls (default 25)
//                                            (tools/metrics_overhead.h)
//   rpcjob-worker send --bytes N --count K [--device D] [--verify] [--every-rank]
//                                            rank 0 sends K tensors of N bytes (on
//                                            device D, default cpu; gpu: this worker's
//                                            first GPU in the assignment) to every peer
//                                            (known traffic, for the metrics tests);
//                                            --verify: the peer checks every byte
//                                            arrived as sent; --every-rank: every
//                                            worker sends, so every ordered pair carries
//                                            traffic (the channel matrix of a machine)
//   common: [--metrics-port N] [--hold-s N] (wait N s before the shutdown barrier)
//   rpcjob-worker --version
//
// Exit codes: 0 success, 1 runtime failure, 2 usage or identity error.

#include <ATen/core/ivalue.h>

#include <ATen/ops/full.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "heap_settings.h"
#include "metrics_overhead.h"
#include "pair_bench.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/runtime/runtime.h"
#include "rpcjob/telemetry/exporter.h"
#include "rpcjob/version.h"

namespace {

int usage() {
  std::cerr
      << "usage: rpcjob-worker serve [--deadline-s N]\n"
         "       rpcjob-worker bench [--json] [--no-large] [--quick] [--ordered]\n"
         "                           [--channels NAME,...|auto]\n"
         "       rpcjob-worker bench --metrics-overhead ROUNDS\n"
         "                           [--recorders observer,channels,transports|all|none]\n"
         "                           [--slice CALLS]\n"
         "       rpcjob-worker send --bytes N --count K [--device cpu|cuda:N|gpu] [--verify]\n"
         "                          [--every-rank]\n"
         "       common options: [--metrics-port N] [--hold-s N]\n"
         "       rpcjob-worker --version\n"
         "identity: RPCJOB_ASSIGNMENT or RPCJOB_PEERS, and RPCJOB_WORKER_NAME or RPCJOB_RANK\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rpcjob::runtime;
  rpcjob::worker::keepFreedHeap();  // before any thread (heap_settings.h says why)
  if (argc < 2) return usage();
  std::string mode = argv[1];
  if (mode == "--version") {
    std::cout << "rpcjob-worker " << RPCJOB_VERSION_STRING << "\n";
    return 0;
  }
  bool json = false;
  rpcjob::worker::BenchConfig config;
  long deadlineSeconds = 24 * 3600;
  int metricsPort = -1;  // -1: RPCJOB_METRICS_PORT or the assignment's metricsPort
  long sendBytes = 1 << 20, sendCount = 10, holdSeconds = 0;
  std::string sendDevice = "cpu";
  bool sendVerify = false;
  bool sendFromEveryRank = false;
  int overheadRounds = 0;  // bench --metrics-overhead
  rpcjob::worker::OverheadConfig overhead;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    try {  // std::stoi and friends throw on "abc" or out-of-range numbers
      if (arg == "--json") {
        json = true;
      } else if (arg == "--no-large") {
        config.large = false;
      } else if (arg == "--quick") {
        config.quick();
      } else if (arg == "--ordered") {
        config.ordered = true;
      } else if (arg == "--channels" && i + 1 < argc) {
        std::string list = argv[++i];
        for (size_t at = 0; at <= list.size();) {
          size_t end = std::min(list.find(',', at), list.size());
          if (end > at) config.channels.push_back(list.substr(at, end - at));
          at = end + 1;
        }
      } else if (arg == "--metrics-overhead" && i + 1 < argc) {
        overheadRounds = std::stoi(argv[++i]);
        if (overheadRounds < 1) return usage();
      } else if (arg == "--recorders" && i + 1 < argc) {
        if (!rpcjob::metrics::parseRecorders(argv[++i], overhead.recorders)) {
          std::cerr << "rpcjob-worker: --recorders: a list of observer, channels, transports, "
                       "all; or none\n";
          return usage();
        }
      } else if (arg == "--slice" && i + 1 < argc) {
        overhead.syncSlice = std::stoi(argv[++i]);
        if (overhead.syncSlice < 1) return usage();
      } else if (arg == "--deadline-s" && i + 1 < argc) {
        deadlineSeconds = std::stol(argv[++i]);
      } else if (arg == "--metrics-port" && i + 1 < argc) {
        metricsPort = std::stoi(argv[++i]);
      } else if (arg == "--bytes" && i + 1 < argc) {
        sendBytes = std::stol(argv[++i]);
      } else if (arg == "--device" && i + 1 < argc) {
        sendDevice = argv[++i];
      } else if (arg == "--count" && i + 1 < argc) {
        sendCount = std::stol(argv[++i]);
      } else if (arg == "--verify") {
        sendVerify = true;
      } else if (arg == "--every-rank") {
        sendFromEveryRank = true;
      } else if (arg == "--hold-s" && i + 1 < argc) {
        holdSeconds = std::stol(argv[++i]);
      } else {
        return usage();
      }
    } catch (const std::logic_error&) {
      std::cerr << "rpcjob-worker: " << arg << ": not a number: " << argv[i] << "\n";
      return usage();
    }
  }
  if (mode != "serve" && mode != "bench" && mode != "send") {
    return usage();
  }

  // Metrics first: they must outlive the runtime's TensorPipe context (rt goes
  // away first, being declared after), and its signal handling must be set up
  // before any thread starts.
  std::unique_ptr<rpcjob::telemetry::Exporter> metrics;
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<rpcjob::worker::BenchAgent> bench;  // after rt: its runtimes go first
  try {
    rpcjob::Identity identity = rpcjob::identityFromEnvironment();
    if (mode == "send" && sendDevice == "gpu") {
      // The assignment's GPU indices are the ones this process sees (cuda:N).
      for (const auto& w : identity.assignment.workers) {
        if (w.name != identity.name) continue;
        if (w.gpus.empty()) {
          throw std::runtime_error("--device gpu: the assignment gives worker '" + w.name +
                                   "' no GPU");
        }
        sendDevice = "cuda:" + std::to_string(w.gpus.front());
      }
    }
    RuntimeOptions options = optionsFromAssignment(identity.assignment, identity.name);
    rpcjob::runtime::applyEnvironment(options);
    metrics = rpcjob::telemetry::fromEnvironment(identity, metricsPort);
    metrics->attach(options);  // off unless a port or file is set; series appear on first use
    if (mode == "bench") {
      bench = std::make_unique<rpcjob::worker::BenchAgent>(identity.assignment, identity.name,
                                                           options, config);
    }
    rt = std::make_unique<Runtime>(std::move(identity.assignment), identity.name,
                                   std::move(options));
  } catch (const std::exception& e) {
    std::cerr << "rpcjob-worker: " << e.what() << "\n";
    return 2;
  }
  bool failed = false;
  try {
    if (bench) {
      bench->registerFunctions(*rt);
      rpcjob::worker::registerRecordingSwitch(*rt);
    }
    // rpcjob-bench's peer serves what its proxy comparison calls.
    if (mode == "serve") rpcjob::worker::registerProxyTargets(*rt);
    if (mode == "send") {
      rt->registerFunction(
          "rpcjob.sink", [](const CallInfo&, std::vector<c10::IValue>) { return c10::IValue(); },
          FunctionOptions{true});
      // The bytes that differ from what rank 0 sent (7 everywhere). On the pool:
      // counting waits for the tensor's stream.
      rt->registerFunction("rpcjob.sink_check", [](const CallInfo&, std::vector<c10::IValue> args) {
        return c10::IValue(args.at(0).toTensor().ne(7).sum().item<int64_t>());
      });
    }
    metrics->serve();
    rt->start();
    metrics->setReady();
    if (mode == "send" && (rt->self().rank == 0 || sendFromEveryRank)) {
      // One uint8 tensor of sendBytes per call: above the inline limit it travels
      // by channel, exactly sendBytes once per call; the answer is None.
      // On a GPU (--device cuda:N) it goes by the assignment's device map.
      at::Tensor tensor =
          at::full({sendBytes}, 7, at::TensorOptions().dtype(at::kByte).device(sendDevice));
      for (const auto& w : rt->workers()) {
        if (w.rank == rt->self().rank) continue;
        int64_t wrong = 0;
        for (long i = 0; i < sendCount; ++i) {
          const c10::IValue answer =
              rt->rpcSync(w.name, sendVerify ? "rpcjob.sink_check" : "rpcjob.sink", {tensor});
          if (sendVerify) wrong += answer.toInt();
        }
        std::cout << "sent " << sendCount << " x " << sendBytes << " bytes to " << w.name
                  << (sendVerify ? wrong == 0 ? "; values exact: yes"
                                              : "; values exact: NO (" + std::to_string(wrong) +
                                                    " bytes differ)"
                                 : "")
                  << std::endl;
        failed = failed || wrong != 0;
      }
    }
    if (holdSeconds > 0) std::this_thread::sleep_for(std::chrono::seconds(holdSeconds));
    if (mode == "bench" && rt->self().rank == 0 && overheadRounds > 0) {
      if (!metrics->enabled())
        throw std::runtime_error("--metrics-overhead needs metrics on (a port or file)");
      if (rt->workers().size() < 2) throw std::runtime_error("--metrics-overhead needs 2 workers");
      overhead.rounds = overheadRounds;
      std::cout << rpcjob::worker::toJson(
                       rpcjob::worker::measureMetricsOverhead(*rt, rt->workers()[1].name, overhead))
                << std::endl;
    } else if (mode == "bench" && rt->self().rank == 0) {
      const auto results = bench->run(*rt);
      std::cout << (json ? rpcjob::worker::toJson(results) + "\n"
                         : rpcjob::worker::toTable(results))
                << std::flush;
    }
    // Serving is waiting in the shutdown barrier: it returns once every worker
    // has joined (or died), and until then this worker keeps answering calls.
    rt->shutdown(ShutdownMode::kGraceful, std::chrono::seconds(deadlineSeconds));
  } catch (const std::exception& e) {
    std::cerr << "rpcjob-worker " << rt->self().name << ": " << e.what() << "\n";
    return 1;
  }
  return failed ? 1 : 0;
}
