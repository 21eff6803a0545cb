// Overhead of the decorators.
//
// 1. Round trips through real TensorPipe pipes: a message with one 8-byte
//    tensor, basic channel, shm and uv transports, chained on TensorPipe's
//    threads (no hand-off); with no decorators, with channel decorators only,
//    and with channel and transport decorators, on both sides. One set-up is
//    alive at a time (shm's reactors busy-poll: idle ones would steal cores),
//    the order rotates every round, and the figure is the median over rounds of
//    each round's ratio to the plain run of the same round.
// 2. The decorator's own cost per transfer, free of system noise: sends through
//    a channel that completes at once, without the decorator, with it paused
//    (rpcjob/metrics/recording.h) and with it recording.
// Target: overhead < 3 % on the round trip.
//
//   instrument_bench [iterations per round] [rounds]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <tensorpipe/channel/channel.h>

#include "immediate_tensorpipe.h"
#include "pipe_pair.h"
#include "rpcjob/instrument/instrument.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/recording.h"

namespace {

using namespace rpcjob;
using testing::ImmediateContext;
using testing::ImmediateTransport;

// mode: 0 none, 1 channels only, 2 channels and transports.
double roundTrip(const std::string& transport, int mode, int iterations) {
  std::unique_ptr<metrics::Metrics> serverMetrics;
  std::unique_ptr<metrics::Metrics> clientMetrics;
  if (mode != 0) {
    serverMetrics = std::make_unique<metrics::Metrics>();
    clientMetrics = std::make_unique<metrics::Metrics>();
  }
  testing::Endpoint server(
      {"server", {"basic"}, transport, mode ? &serverMetrics->channels() : nullptr, mode == 2});
  testing::Endpoint client(
      {"client", {"basic"}, transport, mode ? &clientMetrics->channels() : nullptr, mode == 2});
  auto clientPipe = client.connect(server.listen(), "server");
  auto serverPipe = server.accepted();
  testing::pingPong(*clientPipe, *serverPipe, 8, 500);  // warm up
  const double us = testing::pingPong(*clientPipe, *serverPipe, 8, iterations);
  clientPipe->close();
  serverPipe->close();
  return us;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One write and one read (with a known length), the shape of a payload transfer.
double nsPerWriteRead(tensorpipe::transport::Connection& connection, int n) {
  std::uint64_t data = 0;
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    connection.write(&data, sizeof(data), [&done](const tensorpipe::Error&) { ++done; });
    connection.read(&data, sizeof(data),
                    [&done](const tensorpipe::Error&, const void*, size_t) { ++done; });
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / done;
}

// One nop object written and read, the shape of a message's descriptor (the
// read is the one the decorator wraps: its length is known only when it is done).
double nsPerNopWriteRead(tensorpipe::transport::Connection& connection, int n) {
  tensorpipe::NopHolder<std::uint64_t> object;
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    connection.write(object, [&done](const tensorpipe::Error&) { ++done; });
    connection.read(object, [&done](const tensorpipe::Error&) { ++done; });
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / done;
}

double nsPerSend(tensorpipe::channel::Channel& channel, int n) {
  std::uint64_t data = 0;
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    channel.send(tensorpipe::CpuBuffer{&data}, sizeof(data),
                 [&done](const tensorpipe::Error&) { ++done; });
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / done;
}

// Warms up, measures plain, the decorator paused (present, not recording: what
// metrics cost when a worker has them but the bench switched them off) and the
// decorator recording; prints the three and the differences to plain.
template <typename T>
void printCost(const char* what, T& plain, T& decorated, double (*nsPerOp)(T&, int), int n) {
  nsPerOp(plain, n / 10);
  nsPerOp(decorated, n / 10);
  const double plainNs = nsPerOp(plain, n);
  metrics::setRecording(false);
  const double pausedNs = nsPerOp(decorated, n);
  metrics::setRecording(true);
  const double decoratedNs = nsPerOp(decorated, n);
  std::printf(
      "decorator cost per %s: %.1f ns plain, %.1f ns paused (+%.1f), %.1f ns recording (+%.1f)\n",
      what, plainNs, pausedNs, pausedNs - plainNs, decoratedNs, decoratedNs - plainNs);
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  std::printf(
      "rpcjob instrument overhead: 8-byte tensor round trips, basic channel, "
      "%d rounds x %d round trips per set-up\n",
      rounds, iterations);
  std::printf("%-9s %10s %10s %10s %12s %10s %10s\n", "transport", "plain us", "chan us",
              "chan+tr us", "chan+tr rt/s", "chan ovh", "chan+tr ovh");
  bool ok = true;
  for (const std::string transport : {"shm", "uv"}) {
    std::vector<double> times[3];
    std::vector<double> ratios[3];
    for (int r = 0; r < rounds; ++r) {
      double t[3];
      for (int k = 0; k < 3; ++k) {
        const int mode = (r + k) % 3;
        t[mode] = roundTrip(transport, mode, iterations);
      }
      for (int mode = 0; mode < 3; ++mode) {
        times[mode].push_back(t[mode]);
        ratios[mode].push_back(t[mode] / t[0]);
      }
    }
    const double channelOverhead = (median(ratios[1]) - 1.0) * 100.0;
    const double fullOverhead = (median(ratios[2]) - 1.0) * 100.0;
    std::printf("%-9s %10.2f %10.2f %10.2f %12.0f %9.2f%% %9.2f%%\n", transport.c_str(),
                median(times[0]), median(times[1]), median(times[2]), 1e6 / median(times[2]),
                channelOverhead, fullOverhead);
    ok = ok && fullOverhead < 3.0;
  }
  std::printf("(medians over rounds; overhead = median of per-round ratios to plain)\n");
  std::printf("target: overhead < 3%%: %s\n", ok ? "met" : "NOT met");

  metrics::Metrics m;
  auto plainContext = std::make_shared<ImmediateContext>();
  auto instrumented =
      instrument::instrumentChannel("basic", std::make_shared<ImmediateContext>(), m.channels());
  instrumented->setId("client.ch_basic");
  auto plain = plainContext->createChannel({}, tensorpipe::channel::Endpoint::kConnect);
  auto wrapped = instrumented->createChannel({}, tensorpipe::channel::Endpoint::kConnect);
  wrapped->setId("client_to_server.ch_basic");
  const int n = 2000000;
  printCost("transfer (channel completing at once)", *plain, *wrapped, nsPerSend, n);

  auto plainConnection = ImmediateTransport().connect("");
  auto instrumentedTransport =
      instrument::instrumentTransport("shm", std::make_shared<ImmediateTransport>(), m.channels());
  instrumentedTransport->setId("client.tr_shm");
  auto wrappedConnection = instrumentedTransport->connect("");
  wrappedConnection->setId("client_to_server.tr_shm");
  printCost("transport read or write (connection completing at once)", *plainConnection,
            *wrappedConnection, nsPerWriteRead, n);
  printCost("descriptor-shaped (nop object) read or write", *plainConnection, *wrappedConnection,
            nsPerNopWriteRead, n);
  return 0;
}
