#pragma once
// `rpcjob-worker bench --metrics-overhead N`: what recording metrics costs small
// calls, measured in the same two processes (see rpcjob/metrics/recording.h for
// why not in fresh ones). Both workers run with metrics on; rank 0 drives.
//
// N rounds; in each, both states, "off" (the recorders under test paused in both
// workers; all of them by default) and "on". A state is switched in both workers
// (rpcjob.bench.recording), then measured. Sync: `syncBlock` calls per state, in
// slices of `syncSlice` that alternate between the states (off-on-off-on...,
// the next round on-off-...); the round's figure per state is the p50 of its
// slices' round trips together. Async: one shot of `asyncShot` calls in flight
// per state, in alternating order. Interleaving puts both states under the same
// conditions: thread placement and the machine's load drift over milliseconds,
// and with whole blocks of 500 calls (10 ms) per state that drift made single
// rounds differ by ~10 %, far more than the effect. The overhead is the median
// over rounds of each round's on/off ratio; its quartiles show the spread, and a
// 95 % confidence interval how well the median is known.

#include <string>

#include "rpcjob/metrics/recording.h"
#include "rpcjob/runtime/runtime.h"

namespace rpcjob::worker {

struct OverheadConfig {
  int rounds = 100;
  // The recorders switched (metrics::Recorder bits); the others record in both
  // states. All by default; one at a time tells which costs what.
  unsigned recorders = metrics::kAllRecorders;
  int syncBlock = 500;  // per state and round
  int syncSlice = 25;   // calls between switches
  int asyncShot = 10000;
};

struct MetricsOverhead {
  int rounds = 0;
  unsigned recorders = 0;  // OverheadConfig::recorders
  // Medians over rounds, [0] paused, [1] recording.
  double smallRttP50Us[2] = {0, 0};
  double asyncCallsPerS[2] = {0, 0};
  // Percent, positive when recording is slower: median and quartiles of the
  // per-round ratios.
  double p50OverheadPct[3] = {0, 0, 0};    // q1, median, q3
  double asyncOverheadPct[3] = {0, 0, 0};  // q1, median, q3
  // How well the median is known: its 95 % confidence interval, from the order
  // statistics of the per-round ratios (no assumption about their distribution).
  double p50OverheadCi95[2] = {0, 0};
  double asyncOverheadCi95[2] = {0, 0};
};

// Every bench worker: rpcjob.bench.recording(mask) lets the recorders in the
// mask (metrics::Recorder bits) record in this process and pauses the others.
// Registered in bench mode only.
void registerRecordingSwitch(runtime::Runtime& rt);

// Rank 0, against `peer` (which registered the switch).
MetricsOverhead measureMetricsOverhead(runtime::Runtime& rt, const std::string& peer,
                                       const OverheadConfig& config);

std::string toJson(const MetricsOverhead& m);

}  // namespace rpcjob::worker
