#pragma once
// Built-in benchmark between this worker and one peer: small-call latency, async
// call rate from one caller, and large tensor round trips (identity function).

#include <string>
#include <vector>

#include "rpcjob/runtime/runtime.h"

namespace rpcjob::worker {

struct BenchConfig {
  int smallCalls = 2000;
  int asyncCalls = 20000;
  int rtt4mbIterations = 20;
  int rtt400mbIterations = 5;
  bool large = true;  // include the 400 MB round trip
};

struct PairResult {
  std::string peer;
  double smallRttP50Us = 0;
  double smallRttP99Us = 0;
  double asyncCallsPerS = 0;
  double rtt4mbMs = 0;
  double rtt400mbMs = 0;
  double gbps400mb = 0;
  std::vector<runtime::ChannelChoice> channels;
};

PairResult benchPair(runtime::Runtime& rt, const std::string& peer, const BenchConfig& config);
std::string toJson(const PairResult& result);
std::string toTable(const std::vector<PairResult>& results);

}  // namespace rpcjob::worker
