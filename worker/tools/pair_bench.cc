#include "pair_bench.h"

#include <ATen/core/ivalue.h>
#include <ATen/ops/ones.h>

#include <sys/resource.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "rpcjob/assignment/port_reservation.h"
#include "rpcjob/runtime/call_batch.h"
#include "rpcjob/runtime/remote_object.h"
#include "rpcjob/runtime/shared_host.h"

namespace rpcjob::worker {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::CallOptions;
using runtime::Runtime;

constexpr const char* kPort = "rpcjob.bench.port";
constexpr const char* kOpen = "rpcjob.bench.open";
constexpr const char* kMeasure = "rpcjob.bench.measure";
constexpr const char* kClose = "rpcjob.bench.close";
constexpr const char* kAuto = "auto";
constexpr const char* kEchoFunction = "rpcjob.bench.echo_function";
constexpr const char* kEchoClass = "rpcjob.bench.Echo";
constexpr const char* kReceivePaths = "rpcjob.bench.receive_paths";

struct Echo {};

const CallOptions kOpenTimeout{std::chrono::seconds(120)};
const CallOptions kMeasureTimeout{std::chrono::minutes(30)};

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// How one side's receives moved their bytes between two readings of its
// hostReceivePaths(): "mapped" (memcpy from the sender's region), "pushed" (the
// sender wrote into ours), "process_vm_readv", "mixed: ..." with the counts, or ""
// for none (not over rpcjob_cma).
std::string receivePath(const runtime::HostReceivePaths& before,
                        const runtime::HostReceivePaths& after) {
  const std::pair<const char*, uint64_t> kinds[] = {
      {"mapped", after.sharedReads - before.sharedReads},
      {"pushed", after.pushedReads - before.pushedReads},
      {"process_vm_readv", after.cmaReads - before.cmaReads}};
  std::string only, mixed;
  int seen = 0;
  for (const auto& [name, count] : kinds) {
    if (count == 0) continue;
    ++seen;
    only = name;
    mixed += (mixed.empty() ? "mixed: " : ", ") + std::to_string(count) + " " + name;
  }
  return seen > 1 ? mixed : only;
}

// This process's minor page faults since it started.
int64_t minorFaults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// The peer's hostReceivePaths(), and (`faults`) its minorFaults().
runtime::HostReceivePaths peerReceivePaths(Runtime& rt, const std::string& peer,
                                           int64_t* faults = nullptr) {
  const auto t = rt.rpcSync(peer, kReceivePaths, {}).toTupleRef().elements();
  runtime::HostReceivePaths p;
  p.sharedReads = static_cast<uint64_t>(t.at(0).toInt());
  p.pushedReads = static_cast<uint64_t>(t.at(1).toInt());
  p.cmaReads = static_cast<uint64_t>(t.at(2).toInt());
  if (faults != nullptr) *faults = t.at(3).toInt();
  return p;
}

// Median round trip in seconds of echoing `tensor`; `path` (when given): how
// the requests and the replies were received (PairResult::path4mb).
// `faults` (with `path`): the caller's and the peer's minor page faults per
// round trip (PairResult::faults400mb).
double tensorRtt(Runtime& rt, const std::string& peer, const at::Tensor& tensor, int iterations,
                 std::string* path = nullptr, std::pair<double, double>* faults = nullptr) {
  rt.rpcSync(peer, runtime::kBuiltinEcho, {tensor});  // warm-up: allocator, pages
  // After the warm-up, whose first-time paths are not the figure's.
  const runtime::HostReceivePaths mine =
      path != nullptr ? runtime::hostReceivePaths() : runtime::HostReceivePaths{};
  int64_t theirFaults = 0;
  const runtime::HostReceivePaths theirs =
      path != nullptr ? peerReceivePaths(rt, peer, &theirFaults) : runtime::HostReceivePaths{};
  std::vector<double> times;
  const int64_t myFaults = minorFaults();
  for (int i = 0; i < iterations; ++i) {
    auto start = Clock::now();
    c10::IValue back = rt.rpcSync(peer, runtime::kBuiltinEcho, {tensor});
    times.push_back(secondsSince(start));
    if (back.toTensor().numel() != tensor.numel()) throw std::runtime_error("echo lost data");
  }
  const int64_t myFaultsAfter = minorFaults();
  if (path != nullptr) {
    int64_t theirFaultsAfter = 0;
    const std::string request = receivePath(theirs, peerReceivePaths(rt, peer, &theirFaultsAfter));
    const std::string reply = receivePath(mine, runtime::hostReceivePaths());
    *path = request.empty() && reply.empty() ? "" : "request " + request + ", reply " + reply;
    if (faults != nullptr && iterations > 0) {
      *faults = {static_cast<double>(myFaultsAfter - myFaults) / iterations,
                 static_cast<double>(theirFaultsAfter - theirFaults) / iterations};
    }
  }
  return percentile(times, 0.5);
}

std::string hostOf(const std::string& address) {
  return address.substr(0, address.rfind(':'));
}

c10::IValue encode(const PairResult& r) {
  std::vector<c10::IValue> f = {r.from,
                                r.peer,
                                r.pass,
                                r.channel,
                                r.transport,
                                r.measured,
                                r.note,
                                r.smallRttP50Us,
                                r.smallRttP99Us,
                                r.asyncCallsPerS,
                                r.rtt4mbMs,
                                r.rtt400mbMs,
                                r.gbps400mb,
                                r.functionCallP50Us,
                                r.proxyCallP50Us,
                                r.asyncBatchedCallsPerS,
                                r.rtt4mbSharedMs,
                                r.rtt400mbSharedMs,
                                r.gbps400mbShared,
                                r.path4mb,
                                r.path400mb,
                                r.faults400mb,
                                r.peerFaults400mb};
  return c10::ivalue::Tuple::create(std::move(f));
}

PairResult decode(const c10::IValue& v) {
  const auto& f = v.toTupleRef().elements();
  PairResult r;
  r.from = f.at(0).toStringRef();
  r.peer = f.at(1).toStringRef();
  r.pass = f.at(2).toStringRef();
  r.channel = f.at(3).toStringRef();
  r.transport = f.at(4).toStringRef();
  r.measured = f.at(5).toBool();
  r.note = f.at(6).toStringRef();
  r.smallRttP50Us = f.at(7).toDouble();
  r.smallRttP99Us = f.at(8).toDouble();
  r.asyncCallsPerS = f.at(9).toDouble();
  r.rtt4mbMs = f.at(10).toDouble();
  r.rtt400mbMs = f.at(11).toDouble();
  r.gbps400mb = f.at(12).toDouble();
  r.functionCallP50Us = f.at(13).toDouble();
  r.proxyCallP50Us = f.at(14).toDouble();
  r.asyncBatchedCallsPerS = f.at(15).toDouble();
  r.rtt4mbSharedMs = f.at(16).toDouble();
  r.rtt400mbSharedMs = f.at(17).toDouble();
  r.gbps400mbShared = f.at(18).toDouble();
  r.path4mb = f.at(19).toStringRef();
  r.path400mb = f.at(20).toStringRef();
  r.faults400mb = f.at(21).toDouble();
  r.peerFaults400mb = f.at(22).toDouble();
  return r;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::vector<double> smallCallRtts(Runtime& rt, const std::string& peer, int n) {
  at::Tensor small = at::ones({1});
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    auto start = Clock::now();
    rt.rpcSync(peer, runtime::kBuiltinEcho, {small});
    us.push_back(secondsSince(start) * 1e6);
  }
  return us;
}

double asyncCallRate(Runtime& rt, const std::string& peer, int n, bool batched) {
  std::vector<runtime::Future> futures;
  futures.reserve(n);
  auto start = Clock::now();
  {
    std::optional<runtime::CallBatch> batch;
    if (batched) batch.emplace(rt);
    for (int i = 0; i < n; ++i) {
      futures.push_back(rt.rpcAsync(peer, runtime::kBuiltinEcho, {c10::IValue(int64_t{i})}));
    }
  }
  for (auto& f : futures) f.value();
  return n / secondsSince(start);
}

void registerProxyTargets(Runtime& rt) {
  // Both on the pool (neither runInline), so the comparison is of the proxy's
  // own cost: the object lookup and method dispatch.
  rt.registerFunction(kEchoFunction,
                      [](const runtime::CallInfo&, std::vector<c10::IValue> a) { return a.at(0); });
  // This process's hostReceivePaths(): how a round trip's requests reached it.
  rt.registerFunction(kReceivePaths, [](const runtime::CallInfo&, std::vector<c10::IValue>) {
    const runtime::HostReceivePaths p = runtime::hostReceivePaths();
    return c10::IValue(c10::ivalue::Tuple::create(
        {static_cast<int64_t>(p.sharedReads), static_cast<int64_t>(p.pushedReads),
         static_cast<int64_t>(p.cmaReads), minorFaults()}));
  });
  runtime::registerClass<Echo>(rt, kEchoClass)
      .constructor([](std::vector<c10::IValue>) { return std::make_shared<Echo>(); })
      .method("echo", [](Echo&, std::vector<c10::IValue> a) { return a.at(0); });
}

std::pair<double, double> proxyCallP50s(Runtime& rt, const std::string& peer, int n) {
  at::Tensor small = at::ones({1});
  runtime::RRef echo = rt.remote(peer, kEchoClass, {});
  echo.confirmed().value();
  std::vector<double> function, proxy;
  function.reserve(n);
  proxy.reserve(n);
  for (int i = 0; i < n + 200; ++i) {  // the first 200 of each: warm-up
    auto start = Clock::now();
    rt.rpcSync(peer, kEchoFunction, {small});
    if (i >= 200) function.push_back(secondsSince(start) * 1e6);
    start = Clock::now();
    echo.rpcSync("echo", {small});
    if (i >= 200) proxy.push_back(secondsSince(start) * 1e6);
  }
  return {percentile(function, 0.5), percentile(proxy, 0.5)};
}

// The small calls, the async rates and the proxy call.
void measureCalls(Runtime& rt, const std::string& peer, const BenchConfig& config, PairResult& r) {
  smallCallRtts(rt, peer, 200);  // warm-up
  const std::vector<double> us = smallCallRtts(rt, peer, config.smallCalls);
  r.smallRttP50Us = percentile(us, 0.5);
  r.smallRttP99Us = percentile(us, 0.99);

  double best = 0, bestBatched = 0;
  // RPCJOB_BENCH_ASYNC_ROUNDS=N (default 3): a longer async phase, to profile it
  // (benchmarks/profile/async-threads.sh); the figure stays the best round.
  // RPCJOB_BENCH_ASYNC_PLAIN=1: the rounds after the first leave out the CallBatch
  // (its servers idle while a batch fills, which blurs a profile of the plain calls).
  const char* roundsEnv = std::getenv("RPCJOB_BENCH_ASYNC_ROUNDS");
  const int rounds = roundsEnv != nullptr && std::atoi(roundsEnv) > 0 ? std::atoi(roundsEnv) : 3;
  const char* plainEnv = std::getenv("RPCJOB_BENCH_ASYNC_PLAIN");
  const bool plainOnly = plainEnv != nullptr && std::string(plainEnv) == "1";
  // With RPCJOB_BENCH_ASYNC_ROUNDS set, each round's plain rate goes to stderr too: whether
  // one process pair's rate drifts over time (the host) or stays put (the pair's threads).
  // The round's start and end go with it, on the steady clock (CLOCK_MONOTONIC, in
  // seconds): to line it up with a sampler of where the threads ran (drift_cpus.py).
  const bool eachRound = roundsEnv != nullptr;
  const auto seconds = [](Clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
  };
  for (int round = 0; round < rounds; ++round) {
    const auto began = Clock::now();
    const double rate = asyncCallRate(rt, peer, config.asyncCalls, false);
    if (eachRound) {
      std::fprintf(stderr, "async round %d: %.0f calls/s %.6f %.6f\n", round, rate, seconds(began),
                   seconds(Clock::now()));
    }
    best = std::max(best, rate);
    if (round == 0 || !plainOnly) {
      bestBatched = std::max(bestBatched, asyncCallRate(rt, peer, config.asyncCalls, true));
    }
  }
  r.asyncCallsPerS = best;
  r.asyncBatchedCallsPerS = bestBatched;

  std::tie(r.functionCallP50Us, r.proxyCallP50Us) = proxyCallP50s(rt, peer, config.smallCalls);
}

PairResult benchPair(Runtime& rt, const std::string& peer, const BenchConfig& config) {
  PairResult r;
  r.from = rt.self().name;
  r.peer = peer;
  r.measured = true;
  // RPCJOB_BENCH_ONLY=4mb or 4mb-shared: that round trip alone (the plain
  // tensor's, or the opted-in one's), to trace it (RPCJOB_TRACE,
  // benchmarks/profile/trace_timeline.py); the other figures stay 0.
  const char* onlyEnv = std::getenv("RPCJOB_BENCH_ONLY");
  const std::string only = onlyEnv != nullptr ? onlyEnv : "";
  const bool only4mb = only == "4mb" || only == "4mb-shared";
  if (!only4mb) measureCalls(rt, peer, config, r);

  // Plain tensors first; then the same with useSharedHostAllocator(), the
  // opt-in that puts them in the arena (process-wide and for good: last).
  const int64_t kFloats = 100 * 1000 * 1000;  // 400 MB of float32
  for (bool shared : {false, true}) {
    if (only4mb && shared != (only == "4mb-shared")) continue;
    if (shared) runtime::useSharedHostAllocator();
    at::Tensor mid = at::ones({1 << 20});
    if (shared && !runtime::isSharedHost(mid)) {
      throw std::runtime_error("useSharedHostAllocator() left a 4 MB tensor out of the arena");
    }
    (shared ? r.rtt4mbSharedMs : r.rtt4mbMs) =
        tensorRtt(rt, peer, mid, config.rtt4mbIterations, shared ? nullptr : &r.path4mb) * 1e3;
    if (!config.large || only4mb) continue;
    at::Tensor big = at::ones({kFloats});
    std::pair<double, double> faults{0, 0};
    double seconds = tensorRtt(rt, peer, big, config.rtt400mbIterations,
                               shared ? nullptr : &r.path400mb, shared ? nullptr : &faults);
    if (!shared) std::tie(r.faults400mb, r.peerFaults400mb) = faults;
    (shared ? r.rtt400mbSharedMs : r.rtt400mbMs) = seconds * 1e3;
    (shared ? r.gbps400mbShared : r.gbps400mb) =
        2.0 * static_cast<double>(big.nbytes()) / seconds / 1e9;
  }
  for (const auto& c : rt.channelChoices()) {
    if (c.peer == peer && c.localDevice == "cpu:0" && c.remoteDevice == "cpu:0") {
      r.channel = c.channel;
      r.transport = c.transport;
    }
  }
  return r;
}

struct BenchAgent::State {
  Assignment assignment;
  std::string name;
  runtime::RuntimeOptions base;
  BenchConfig config;
  std::mutex mu;
  std::unique_ptr<Runtime> pass;  // the current channel pass's runtime
  std::string passChannel;
  // The next pass's port, held until its runtime listens (or the pass closes):
  // released at once, it was now and then taken by a test running beside us,
  // and the worker aborted in TensorPipe's listen. Any address: the pass
  // listens on this worker's host, which may be a pod's.
  std::optional<PortReservation> passPort;

  // "host:port" for this worker's next pass runtime, the port reserved.
  std::string reservePassAddress() {
    std::lock_guard<std::mutex> lock(mu);
    passPort.emplace(1, true);
    return hostOf(assignment.byName(name)->address) + ":" + std::to_string(passPort->ports()[0]);
  }
  void releasePassPort() {
    std::lock_guard<std::mutex> lock(mu);
    passPort.reset();
  }

  // rpcjob.bench.open: a runtime on `addresses` (rank order) with channels {C, basic}.
  void open(const std::string& channel, const std::vector<std::string>& addresses) {
    Assignment a = assignment;
    if (addresses.size() != a.workers.size()) throw std::invalid_argument("bad address list");
    for (size_t i = 0; i < a.workers.size(); ++i) {
      a.workers[i].address = addresses[i];
      a.workers[i].metricsPort = 0;
    }
    a.channels.clear();
    runtime::RuntimeOptions options = base;
    // The worker's decorators (hooks) stay: what a pass moves is counted per
    // channel in the worker's metrics, which the job's summary and /metrics
    // show. Its observer does not: the RPC call counts and the channel-selection
    // gauge stay the worker's own runtime's, not five passes' in turn.
    options.observer = nullptr;
    options.channels = {channel};
    if (channel != "basic") options.channels.push_back("basic");
    options.startTimeout = std::chrono::seconds(60);
    auto rt = std::make_unique<Runtime>(std::move(a), name, std::move(options));
    registerProxyTargets(*rt);
    try {
      rt->start();  // returns once the peers reached its listener
    } catch (...) {
      releasePassPort();
      throw;
    }
    releasePassPort();
    std::lock_guard<std::mutex> lock(mu);
    pass = std::move(rt);
    passChannel = channel;
  }

  PairResult measure(Runtime& control, const std::string& peer, const std::string& channel,
                     const BenchConfig& config) {
    Runtime* rt = &control;
    std::unique_lock<std::mutex> lock(mu);
    if (channel != kAuto) {
      if (!pass || passChannel != channel) {
        throw std::runtime_error("no runtime open for channel " + channel);
      }
      rt = pass.get();
    }
    lock.unlock();
    std::string chosen = "?", transport = "?";
    for (const auto& c : rt->channelChoices()) {
      if (c.peer == peer && c.localDevice == "cpu:0" && c.remoteDevice == "cpu:0") {
        chosen = c.channel;
        transport = c.transport;
      }
    }
    if (channel != kAuto && chosen != channel) {
      PairResult r;
      r.from = rt->self().name;
      r.peer = peer;
      r.pass = channel;
      r.channel = chosen;
      r.transport = transport;
      r.note = channel + " not usable between them (TensorPipe chose " + chosen + ")";
      return r;
    }
    PairResult r = benchPair(*rt, peer, config);
    r.pass = channel;
    return r;
  }

  void close(bool graceful) {
    releasePassPort();
    std::unique_ptr<Runtime> rt;
    {
      std::lock_guard<std::mutex> lock(mu);
      rt = std::move(pass);
      passChannel.clear();
    }
    if (rt) {
      rt->shutdown(graceful ? runtime::ShutdownMode::kGraceful : runtime::ShutdownMode::kImmediate,
                   std::chrono::seconds(60));
    }
  }
};

BenchAgent::BenchAgent(Assignment assignment, std::string name, runtime::RuntimeOptions base,
                       BenchConfig config)
    : state_(std::make_shared<State>()) {
  state_->assignment = std::move(assignment);
  state_->name = std::move(name);
  state_->base = std::move(base);
  state_->config = std::move(config);
}

BenchAgent::~BenchAgent() {
  if (state_) state_->close(false);
}

void BenchAgent::registerFunctions(Runtime& control) {
  auto state = state_;
  registerProxyTargets(control);
  control.registerFunction(kPort, [state](const runtime::CallInfo&, std::vector<c10::IValue>) {
    return c10::IValue(state->reservePassAddress());
  });
  control.registerFunction(kOpen, [state](const runtime::CallInfo&, std::vector<c10::IValue> a) {
    std::vector<std::string> addresses;
    for (const auto& e : a.at(1).toListRef()) addresses.push_back(e.toStringRef());
    state->open(a.at(0).toStringRef(), addresses);
    return c10::IValue();
  });
  control.registerFunction(
      kMeasure, [state](const runtime::CallInfo& call, std::vector<c10::IValue> a) {
        // Rank 0's iteration counts, whatever this worker was given.
        const auto& c = a.at(2).toTupleRef().elements();
        BenchConfig config;
        config.smallCalls = static_cast<int>(c.at(0).toInt());
        config.asyncCalls = static_cast<int>(c.at(1).toInt());
        config.rtt4mbIterations = static_cast<int>(c.at(2).toInt());
        config.rtt400mbIterations = static_cast<int>(c.at(3).toInt());
        config.large = c.at(4).toBool();
        return encode(
            state->measure(call.runtime, a.at(0).toStringRef(), a.at(1).toStringRef(), config));
      });
  control.registerFunction(kClose, [state](const runtime::CallInfo&, std::vector<c10::IValue> a) {
    state->close(a.at(0).toBool());
    return c10::IValue();
  });
}

std::vector<PairResult> BenchAgent::run(Runtime& control) {
  State& s = *state_;
  std::vector<std::string> passes = s.config.channels;
  if (passes.empty()) passes = s.base.channels.empty() ? kBenchChannels : s.base.channels;
  const auto& workers = control.workers();  // rank order
  const std::string& self = control.self().name;

  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t i = 0; i < workers.size(); ++i) {
    for (size_t j = 0; j < workers.size(); ++j) {
      if (i != j && (s.config.ordered || i < j)) pairs.emplace_back(i, j);
    }
  }

  std::vector<PairResult> results;
  for (const std::string& channel : passes) {
    std::string failure;
    if (channel != kAuto) {
      // Addresses, then every worker opens and starts its runtime at once.
      std::vector<std::string> addresses;
      c10::List<std::string> list;
      for (const auto& w : workers) {
        std::string address = w.name == self ? s.reservePassAddress()
                                             : control.rpcSync(w.name, kPort, {}).toStringRef();
        addresses.push_back(address);
        list.push_back(address);
      }
      std::vector<std::pair<std::string, runtime::Future>> opens;
      for (const auto& w : workers) {
        if (w.name == self) continue;
        opens.emplace_back(w.name, control.rpcAsync(w.name, kOpen, {channel, list}, kOpenTimeout));
      }
      try {
        s.open(channel, addresses);
      } catch (const std::exception& e) {
        failure = self + ": " + e.what();
      }
      for (auto& [name, f] : opens) {
        try {
          f.value();
        } catch (const std::exception& e) {
          if (failure.empty()) failure = name + ": " + e.what();
        }
      }
    }
    for (const auto& [i, j] : pairs) {
      PairResult r;
      if (!failure.empty()) {
        r.from = workers[i].name;
        r.peer = workers[j].name;
        r.pass = channel;
        r.note = "pass failed: " + failure;
      } else if (workers[i].name == self) {
        r = s.measure(control, workers[j].name, channel, s.config);
      } else {
        const auto& c = s.config;
        c10::IValue config = c10::ivalue::Tuple::create(
            {int64_t{c.smallCalls}, int64_t{c.asyncCalls}, int64_t{c.rtt4mbIterations},
             int64_t{c.rtt400mbIterations}, c.large});
        r = decode(control.rpcSync(workers[i].name, kMeasure, {workers[j].name, channel, config},
                                   kMeasureTimeout));
      }
      results.push_back(std::move(r));
    }
    if (channel != kAuto) {
      // A failed pass may have left runtimes waiting for peers: close at once.
      const bool graceful = failure.empty();
      std::vector<runtime::Future> closes;
      for (const auto& w : workers) {
        if (w.name != self)
          closes.push_back(control.rpcAsync(w.name, kClose, {graceful}, kOpenTimeout));
      }
      s.close(graceful);
      for (auto& f : closes) f.value();
    }
  }
  return results;
}

std::string toJson(const std::vector<PairResult>& results) {
  std::ostringstream out;
  out << "{\"results\":[";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    out << (i ? "," : "") << "{\"from\":" << jsonString(r.from)
        << ",\"peer\":" << jsonString(r.peer) << ",\"channel\":" << jsonString(r.channel)
        << ",\"transport\":" << jsonString(r.transport) << ",\"pass\":" << jsonString(r.pass)
        << ",\"measured\":" << (r.measured ? "true" : "false");
    if (r.measured) {
      out << ",\"small_rtt_p50_us\":" << r.smallRttP50Us
          << ",\"small_rtt_p99_us\":" << r.smallRttP99Us
          << ",\"async_calls_per_s\":" << r.asyncCallsPerS
          << ",\"async_batched_calls_per_s\":" << r.asyncBatchedCallsPerS
          << ",\"rtt_4mb_ms\":" << r.rtt4mbMs << ",\"rtt_400mb_ms\":" << r.rtt400mbMs
          << ",\"gbps_400mb\":" << r.gbps400mb << ",\"rtt_4mb_shared_ms\":" << r.rtt4mbSharedMs
          << ",\"rtt_400mb_shared_ms\":" << r.rtt400mbSharedMs
          << ",\"gbps_400mb_shared\":" << r.gbps400mbShared
          << ",\"path_4mb\":" << jsonString(r.path4mb)
          << ",\"path_400mb\":" << jsonString(r.path400mb) << ",\"faults_400mb\":" << r.faults400mb
          << ",\"peer_faults_400mb\":" << r.peerFaults400mb
          << ",\"function_call_p50_us\":" << r.functionCallP50Us
          << ",\"proxy_call_p50_us\":" << r.proxyCallP50Us;
    } else {
      out << ",\"note\":" << jsonString(r.note);
    }
    out << "}";
  }
  out << "]}";
  return out.str();
}

std::string toTable(const std::vector<PairResult>& results) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-12s %-12s %-11s %-9s %9s %9s %10s %9s %10s %7s\n", "from",
                "to", "channel", "transport", "p50 us", "p99 us", "async/s", "4MB ms", "400MB ms",
                "GB/s");
  out << line;
  for (const auto& r : results) {
    const std::string channel = r.measured ? r.channel : r.pass;
    if (!r.measured) {
      std::snprintf(line, sizeof(line), "%-12s %-12s %-11s %-9s %s\n", r.from.c_str(),
                    r.peer.c_str(), channel.c_str(), "-", r.note.c_str());
    } else if (r.rtt400mbMs > 0) {
      std::snprintf(
          line, sizeof(line), "%-12s %-12s %-11s %-9s %9.1f %9.1f %10.0f %9.3f %10.1f %7.2f\n",
          r.from.c_str(), r.peer.c_str(), channel.c_str(), r.transport.c_str(), r.smallRttP50Us,
          r.smallRttP99Us, r.asyncCallsPerS, r.rtt4mbMs, r.rtt400mbMs, r.gbps400mb);
    } else {
      std::snprintf(line, sizeof(line),
                    "%-12s %-12s %-11s %-9s %9.1f %9.1f %10.0f %9.3f %10s %7s\n", r.from.c_str(),
                    r.peer.c_str(), channel.c_str(), r.transport.c_str(), r.smallRttP50Us,
                    r.smallRttP99Us, r.asyncCallsPerS, r.rtt4mbMs, "-", "-");
    }
    out << line;
  }
  return out.str();
}

}  // namespace rpcjob::worker
