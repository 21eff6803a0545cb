#include "metrics_overhead.h"

#include <ATen/core/ivalue.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "pair_bench.h"
#include "rpcjob/metrics/recording.h"

namespace rpcjob::worker {
namespace {

constexpr const char* kRecording = "rpcjob.bench.recording";

// The recorders in `mask` record, here and in `peer`; the others are paused.
void setRecording(runtime::Runtime& rt, const std::string& peer, unsigned mask) {
  rt.rpcSync(peer, kRecording, {static_cast<int64_t>(mask)});
  metrics::setRecording(mask);
}

// The 95 % confidence interval of the median of `v`: the order statistics of
// ranks n/2 -+ 1.96 sqrt(n)/2 (1-based), which hold the median with 95 %
// probability whatever the distribution (normal approximation of the binomial).
void medianCi95(std::vector<double> v, double out[2]) {
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  const double half = 1.96 * std::sqrt(n) / 2;
  const auto rank = [&](double r) {  // 1-based rank, clamped, to 0-based index
    return static_cast<std::size_t>(std::clamp(r, 1.0, n)) - 1;
  };
  out[0] = v[rank(std::floor(n / 2 - half))];
  out[1] = v[rank(std::ceil(n / 2 + 1 + half))];
}

}  // namespace

void registerRecordingSwitch(runtime::Runtime& rt) {
  rt.registerFunction(kRecording, [](const runtime::CallInfo&, std::vector<c10::IValue> args) {
    metrics::setRecording(static_cast<unsigned>(args.at(0).toInt()));
    return c10::IValue();
  });
}

MetricsOverhead measureMetricsOverhead(runtime::Runtime& rt, const std::string& peer,
                                       const OverheadConfig& config) {
  // [0]: the recorders under test paused, the others recording; [1]: all.
  const unsigned masks[2] = {metrics::kAllRecorders & ~config.recorders, metrics::kAllRecorders};
  for (int on = 0; on < 2; ++on) {  // warm-up of both states
    setRecording(rt, peer, masks[on]);
    smallCallRtts(rt, peer, config.syncBlock);
    asyncCallRate(rt, peer, config.asyncShot);
  }
  std::vector<double> p50[2], rate[2], p50Ratio, rateRatio;
  for (int round = 0; round < config.rounds; ++round) {
    std::vector<double> rtts[2];
    const auto block = static_cast<std::size_t>(config.syncBlock);
    for (int slice = 0; rtts[0].size() < block || rtts[1].size() < block; ++slice) {
      const int on = (round + slice) % 2;
      const int n = static_cast<int>(
          std::min(static_cast<std::size_t>(config.syncSlice), block - rtts[on].size()));
      if (n == 0) continue;
      setRecording(rt, peer, masks[on]);
      const auto calls = smallCallRtts(rt, peer, n);
      rtts[on].insert(rtts[on].end(), calls.begin(), calls.end());
    }
    double blockP50[2], shotRate[2];
    for (int k = 0; k < 2; ++k) {
      const int on = (round + k) % 2;
      blockP50[on] = percentile(rtts[on], 0.5);
      setRecording(rt, peer, masks[on]);
      shotRate[on] = asyncCallRate(rt, peer, config.asyncShot);
    }
    for (int on = 0; on < 2; ++on) {
      p50[on].push_back(blockP50[on]);
      rate[on].push_back(shotRate[on]);
    }
    p50Ratio.push_back((blockP50[1] / blockP50[0] - 1) * 100);
    rateRatio.push_back((shotRate[0] / shotRate[1] - 1) * 100);
  }
  setRecording(rt, peer, metrics::kAllRecorders);
  MetricsOverhead m;
  m.rounds = config.rounds;
  m.recorders = config.recorders;
  for (int on = 0; on < 2; ++on) {
    m.smallRttP50Us[on] = percentile(p50[on], 0.5);
    m.asyncCallsPerS[on] = percentile(rate[on], 0.5);
  }
  const double qs[3] = {0.25, 0.5, 0.75};
  for (int i = 0; i < 3; ++i) {
    m.p50OverheadPct[i] = percentile(p50Ratio, qs[i]);
    m.asyncOverheadPct[i] = percentile(rateRatio, qs[i]);
  }
  medianCi95(p50Ratio, m.p50OverheadCi95);
  medianCi95(rateRatio, m.asyncOverheadCi95);
  return m;
}

std::string toJson(const MetricsOverhead& m) {
  char out[640];
  std::snprintf(out, sizeof(out),
                "{\"rounds\": %d, \"recorders\": %u, \"small_rtt_p50_us\": [%.3f, %.3f], "
                "\"async_calls_per_s\": "
                "[%.0f, %.0f], \"overhead_pct\": {\"small_rtt_p50\": [%.2f, %.2f, %.2f], "
                "\"async_calls\": [%.2f, %.2f, %.2f]}, \"overhead_ci95\": {\"small_rtt_p50\": "
                "[%.2f, %.2f], \"async_calls\": [%.2f, %.2f]}}",
                m.rounds, m.recorders, m.smallRttP50Us[0], m.smallRttP50Us[1], m.asyncCallsPerS[0],
                m.asyncCallsPerS[1], m.p50OverheadPct[0], m.p50OverheadPct[1], m.p50OverheadPct[2],
                m.asyncOverheadPct[0], m.asyncOverheadPct[1], m.asyncOverheadPct[2],
                m.p50OverheadCi95[0], m.p50OverheadCi95[1], m.asyncOverheadCi95[0],
                m.asyncOverheadCi95[1]);
  return out;
}

}  // namespace rpcjob::worker
