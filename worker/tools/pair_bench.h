#pragma once
// `rpcjob-worker bench`: latency, call rate and bandwidth between pairs of
// workers, over every CPU channel.
//
// Rank 0 drives, through the workers' own runtime (the "control" runtime, with
// the job's channels), so that measurements never overlap:
//
//   for each channel pass C (default: the job's allowed channels, else
//   rpcjob_cma, cma, mpt, xth, basic; "auto" measures on the control runtime):
//     every worker opens a fresh Runtime on a free port whose allowed channels
//     are {C, basic} (TensorPipe has no per-call channel choice, so one runtime
//     per channel it is); all of them start together (rpcjob.bench.open);
//     for each pair (i, j), one at a time, worker i measures against worker j
//     (rpcjob.bench.measure): if TensorPipe did not pick C between them (C is
//     not viable there, e.g. xth across processes, cma without ptrace rights),
//     the row says so instead of measuring basic under C's name;
//     every worker shuts that runtime down (rpcjob.bench.close).
//
// Pairs: each unordered pair once (i < j, i measures; the round trip goes both
// ways), or every ordered pair with --ordered.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rpcjob/assignment/assignment.h"
#include "rpcjob/runtime/options.h"
#include "rpcjob/runtime/runtime.h"

namespace rpcjob::worker {

// The default channel passes when the job does not restrict its channels.
inline const std::vector<std::string> kBenchChannels = {"rpcjob_cma", "cma", "mpt", "xth", "basic"};

struct BenchConfig {
  int smallCalls = 2000;
  int asyncCalls = 20000;
  int rtt4mbIterations = 20;
  int rtt400mbIterations = 5;
  bool large = true;     // include the 400 MB round trip
  bool ordered = false;  // every ordered pair instead of each unordered pair once
  // Channel passes; empty: the job's channels, else kBenchChannels. "auto": the
  // control runtime as configured (what rpcjob-bench measures).
  std::vector<std::string> channels;

  void quick() {  // --quick: small iteration counts (CI)
    smallCalls = 200;
    asyncCalls = 2000;
    rtt4mbIterations = 5;
    rtt400mbIterations = 2;
  }
};

struct PairResult {
  std::string from;
  std::string peer;
  std::string pass;       // the channel pass ("auto" or a channel name)
  std::string channel;    // what TensorPipe chose for cpu:0 -> cpu:0
  std::string transport;  // and the transport
  bool measured = false;
  std::string note;  // why not measured
  double smallRttP50Us = 0;
  double smallRttP99Us = 0;
  double asyncCallsPerS = 0;
  double asyncBatchedCallsPerS = 0;  // the same calls inside a CallBatch
  double rtt4mbMs = 0;
  double rtt400mbMs = 0;
  double gbps400mb = 0;
  // The same round trips with the caller's tensor in the shared arena
  // (rpcjob/runtime/shared_host.h): rpcjob_cma reads it with memcpy.
  double rtt4mbSharedMs = 0;
  double rtt400mbSharedMs = 0;
  double gbps400mbShared = 0;
  // How the plain 4 MB and 400 MB round trips moved their bytes, each side's
  // receives counted (rpcjob/runtime/shared_host.h's hostReceivePaths) after the
  // warm-up: "request P, reply Q", each of "mapped" (memcpy from the sender's
  // region), "pushed" (the sender memcpy'd into the receiver's), "process_vm_readv"
  // or "mixed: ..." with the counts; "" when not measured or not over rpcjob_cma.
  std::string path4mb;
  std::string path400mb;
  // The caller's and the peer's minor page faults per plain 400 MB round trip
  // (getrusage), after the warm-up: memory their copies touch for the first
  // time. A round trip at process_vm_readv's speed on memcpy's path may say
  // why here.
  double faults400mb = 0;
  double peerFaults400mb = 0;
  // A registered function on the pool vs a method of a remote object through
  // an RRef proxy (rref.rpcSync), one-element tensor, calls interleaved.
  double functionCallP50Us = 0;
  double proxyCallP50Us = 0;
};

// The value at quantile p of v (nearest rank; 0 for none).
double percentile(std::vector<double> v, double p);
// Round trips of `n` sync echo calls of a one-element tensor, in microseconds,
// in call order.
std::vector<double> smallCallRtts(runtime::Runtime& rt, const std::string& peer, int n);
// Calls per second of `n` async echo calls put in flight at once; `batched`:
// made inside a CallBatch (rpcjob/runtime/call_batch.h).
double asyncCallRate(runtime::Runtime& rt, const std::string& peer, int n, bool batched = false);

// The function and the class the proxy comparison calls (every runtime of the
// bench registers them before start()).
void registerProxyTargets(runtime::Runtime& rt);
// p50s in microseconds of `n` calls of each, interleaved: {function, proxy}.
std::pair<double, double> proxyCallP50s(runtime::Runtime& rt, const std::string& peer, int n);

// Measures this worker against `peer` on `rt`.
PairResult benchPair(runtime::Runtime& rt, const std::string& peer, const BenchConfig& config);

// Every worker: the rpcjob.bench.* functions (before start()). `base` are the
// options the control runtime was made with; the per-channel runtimes take its
// transports and timeouts, no hooks or observer.
class BenchAgent {
 public:
  BenchAgent(Assignment assignment, std::string name, runtime::RuntimeOptions base,
             BenchConfig config);
  ~BenchAgent();
  void registerFunctions(runtime::Runtime& control);
  // Rank 0: every pass and pair, in turn.
  std::vector<PairResult> run(runtime::Runtime& control);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

std::string toJson(const std::vector<PairResult>& results);
std::string toTable(const std::vector<PairResult>& results);

}  // namespace rpcjob::worker
