// What recording one RPC costs the thread that records it: the metrics
// observer's start and finish of a served call (rpcjob-worker's, worker/telemetry),
// with its two event times, in a loop on one thread: free of the system noise
// that hides a few nanoseconds in rpcjob-bench --metrics. Printed per call,
// beside the same with the steady clock read for each time (what EventTime did
// before the event clock), in a lane poller's turns (their answers' finish
// read once per turn), with recording paused, and the clocks alone.
//
//   rpcjob-observer-bench [calls per round] [rounds]     (medians over rounds)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "metrics_observer.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/recording.h"
#include "rpcjob/runtime/observer.h"

namespace {

using rpcjob::runtime::CallStatus;
using rpcjob::runtime::EventTime;
using Clock = std::chrono::steady_clock;

// Nanoseconds per iteration of `body`, median over `rounds` rounds of `n`.
double perCall(int n, int rounds, const std::function<void(int)>& body) {
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    body(n);
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  std::nth_element(ns.begin(), ns.begin() + ns.size() / 2, ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 21;
  if (n <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: rpcjob-observer-bench [calls per round > 0] [rounds > 0]\n");
    return 2;
  }
  rpcjob::metrics::Metrics metrics;
  rpcjob::telemetry::MetricsObserver observer(metrics.rpc(), {"echo"});
  const std::string function = "echo", peer = "w0";
  std::uint64_t sink = 0;

  // A served call as the runtime reports it: arrival, start, finish after the
  // answer is written; each time read by the observer when it asks.
  auto eventClock = [&](int calls) {
    for (int i = 0; i < calls; ++i) {
      const EventTime arrived;
      auto token = observer.serverCallStarted(function, peer, arrived);
      const EventTime written;
      observer.serverCallFinished(function, peer, CallStatus::kOk, token, written);
    }
  };
  // On a lane's poller the calls answered in one turn are recorded together
  // once the turn publishes their answers, with one read (RuntimeImpl::
  // deferServed): here turns of 8 calls.
  auto inATurn = [&](int calls) {
    rpcjob::runtime::Observer::CallToken tokens[8];
    for (int i = 0; i < calls; i += 8) {
      const int turn = std::min(8, calls - i);
      for (int k = 0; k < turn; ++k) {
        const EventTime arrived;
        tokens[k] = observer.serverCallStarted(function, peer, arrived);
      }
      const EventTime published;
      for (int k = 0; k < turn; ++k) {
        observer.serverCallFinished(function, peer, CallStatus::kOk, tokens[k], published);
      }
    }
  };
  auto steadyClock = [&](int calls) {
    for (int i = 0; i < calls; ++i) {
      const EventTime arrived(Clock::now());
      auto token = observer.serverCallStarted(function, peer, arrived);
      const EventTime written(Clock::now());
      observer.serverCallFinished(function, peer, CallStatus::kOk, token, written);
    }
  };
  auto steadyReads = [&](int calls) {
    for (int i = 0; i < calls; ++i) sink += Clock::now().time_since_epoch().count();
  };
  auto eventReads = [&](int calls) {
    for (int i = 0; i < calls; ++i) {
      sink += rpcjob::runtime::readEventClock().time_since_epoch().count();
    }
  };

  (void)rpcjob::runtime::readEventClock();  // calibrates the counter
  eventClock(n);                            // warm-up
  const double recorded = perCall(n, rounds, eventClock);
  const double recordedSteady = perCall(n, rounds, steadyClock);
  const double turn = perCall(n, rounds, inATurn);
  rpcjob::metrics::setRecording(false);
  const double paused = perCall(n, rounds, eventClock);
  rpcjob::metrics::setRecording(true);
  const double steady = perCall(n, rounds, steadyReads);
  const double event = perCall(n, rounds, eventReads);

  std::printf("one served call recorded, ns per call (median of %d rounds of %d)\n", rounds, n);
  std::printf("%-44s %8s %14s\n", "measurement", "ours", "steady clock");
  std::printf("%-44s %8.1f %14.1f\n", "observer: start + finish, two event times", recorded,
              recordedSteady);
  std::printf("%-44s %8.1f %14s\n", "the same, answered in turns of 8", turn, "-");
  std::printf("%-44s %8.1f %14s\n", "the same, recording paused", paused, "-");
  std::printf("%-44s %8.1f %14.1f\n", "one clock read", event, steady);
  return sink == 42 ? 1 : 0;  // keeps the reads
}
