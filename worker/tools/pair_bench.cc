#include "pair_bench.h"

#include <ATen/core/ivalue.h>
#include <ATen/ops/ones.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

namespace rpcjob::worker {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Median round trip in seconds of echoing `tensor`.
double tensorRtt(runtime::Runtime& rt, const std::string& peer, const at::Tensor& tensor,
                 int iterations) {
  rt.rpcSync(peer, runtime::kBuiltinEcho, {tensor});  // warm-up: allocator, pages
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    auto start = Clock::now();
    c10::IValue back = rt.rpcSync(peer, runtime::kBuiltinEcho, {tensor});
    times.push_back(secondsSince(start));
    if (back.toTensor().numel() != tensor.numel()) throw std::runtime_error("echo lost data");
  }
  return percentile(times, 0.5);
}

}  // namespace

PairResult benchPair(runtime::Runtime& rt, const std::string& peer, const BenchConfig& config) {
  PairResult r;
  r.peer = peer;
  at::Tensor small = at::ones({1});
  for (int i = 0; i < 200; ++i) rt.rpcSync(peer, runtime::kBuiltinEcho, {small});
  std::vector<double> us;
  us.reserve(config.smallCalls);
  for (int i = 0; i < config.smallCalls; ++i) {
    auto start = Clock::now();
    rt.rpcSync(peer, runtime::kBuiltinEcho, {small});
    us.push_back(secondsSince(start) * 1e6);
  }
  r.smallRttP50Us = percentile(us, 0.5);
  r.smallRttP99Us = percentile(us, 0.99);

  double best = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<runtime::Future> futures;
    futures.reserve(config.asyncCalls);
    auto start = Clock::now();
    for (int i = 0; i < config.asyncCalls; ++i) {
      futures.push_back(rt.rpcAsync(peer, runtime::kBuiltinEcho, {c10::IValue(int64_t{i})}));
    }
    for (auto& f : futures) f.value();
    best = std::max(best, config.asyncCalls / secondsSince(start));
  }
  r.asyncCallsPerS = best;

  r.rtt4mbMs = tensorRtt(rt, peer, at::ones({1 << 20}), config.rtt4mbIterations) * 1e3;
  if (config.large) {
    at::Tensor big = at::ones({100 * 1000 * 1000});  // 400 MB of float32
    double seconds = tensorRtt(rt, peer, big, config.rtt400mbIterations);
    r.rtt400mbMs = seconds * 1e3;
    r.gbps400mb = 2.0 * static_cast<double>(big.nbytes()) / seconds / 1e9;
  }
  for (const auto& c : rt.channelChoices()) {
    if (c.peer == peer) r.channels.push_back(c);
  }
  return r;
}

std::string toJson(const PairResult& r) {
  std::ostringstream out;
  out << "{\"peer\":\"" << r.peer << "\",\"small_rtt_p50_us\":" << r.smallRttP50Us
      << ",\"small_rtt_p99_us\":" << r.smallRttP99Us
      << ",\"async_calls_per_s\":" << r.asyncCallsPerS << ",\"rtt_4mb_ms\":" << r.rtt4mbMs
      << ",\"rtt_400mb_ms\":" << r.rtt400mbMs << ",\"gbps_400mb\":" << r.gbps400mb
      << ",\"channels\":[";
  for (size_t i = 0; i < r.channels.size(); ++i) {
    const auto& c = r.channels[i];
    out << (i ? "," : "") << "{\"local\":\"" << c.localDevice << "\",\"remote\":\""
        << c.remoteDevice << "\",\"channel\":\"" << c.channel << "\",\"transport\":\""
        << c.transport << "\"}";
  }
  out << "]}";
  return out.str();
}

std::string toTable(const std::vector<PairResult>& results) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-16s %10s %10s %12s %10s %11s %9s  %s\n", "peer", "p50 us",
                "p99 us", "async/s", "4MB ms", "400MB ms", "GB/s", "channel (cpu)");
  out << line;
  for (const auto& r : results) {
    std::string channel =
        r.channels.empty() ? "?"
                           : r.channels.front().channel + " over " + r.channels.front().transport;
    std::snprintf(line, sizeof(line), "%-16s %10.1f %10.1f %12.0f %10.3f %11.1f %9.2f  %s\n",
                  r.peer.c_str(), r.smallRttP50Us, r.smallRttP99Us, r.asyncCallsPerS, r.rtt4mbMs,
                  r.rtt400mbMs, r.gbps400mb, channel.c_str());
    out << line;
  }
  return out.str();
}

}  // namespace rpcjob::worker
