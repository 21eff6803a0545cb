// The decorators with real TensorPipe pipes: two contexts in this process, a
// listener and a pipe over the uv transport, each channel wrapped in turn.

#include <future>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <tensorpipe/channel/channel.h>
#include <tensorpipe/channel/error.h>

#include "immediate_tensorpipe.h"
#include "pipe_pair.h"
#include "rpcjob/instrument/instrument.h"
#include "rpcjob/instrument/peer_id.h"
#include "rpcjob/metrics/channel_metrics.h"
#include "rpcjob/metrics/metrics.h"
#include "rpcjob/metrics/recording.h"

namespace rpcjob {
namespace {

using testing::Bytes;
using testing::Endpoint;
using testing::EndpointOptions;
using testing::ImmediateContext;
using testing::ImmediateTransport;

// The value of one series, matched on all of `labels` (other labels ignored);
// -1 when no series matches.
double value(const metrics::Metrics& m, const std::string& name,
             const std::map<std::string, std::string>& labels) {
  for (const auto& family : m.collect()) {
    if (family.name != name) {
      continue;
    }
    for (const auto& metric : family.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& label : metric.label) {
          found = found || (label.name == k && label.value == v);
        }
        match = match && found;
      }
      if (match) {
        return family.type == prometheus::MetricType::Histogram
                   ? static_cast<double>(metric.histogram.sample_count)
               : family.type == prometheus::MetricType::Gauge ? metric.gauge.value
                                                              : metric.counter.value;
      }
    }
  }
  return -1;
}

TEST(PeerFromId, ParsesTensorPipeIds) {
  using instrument::peerFromId;
  EXPECT_EQ(peerFromId("worker0", "worker0_to_worker1.ch_basic"), "worker1");
  EXPECT_EQ(peerFromId("worker0", "worker0[l0]_from_worker1.ch_cma"), "worker1");
  EXPECT_EQ(peerFromId("worker0", "worker0.l2_from_master.ch_xth"), "master");
  EXPECT_EQ(peerFromId("worker0", "worker0_to_worker1.tr_uv"), "worker1");
  EXPECT_EQ(peerFromId("worker0", "worker0_to_worker1.d.tr_shm"), "worker1");
  EXPECT_EQ(peerFromId("worker0", "worker0_to_worker1.r.tr_uv"), "worker1");
  EXPECT_EQ(peerFromId("worker0", "worker0[l0]_from_worker1.ch_basic_0"), "worker1");
  EXPECT_EQ(peerFromId("", "worker0_to_worker1.ch_basic"), "worker1");
  // A local name that itself contains "_to_" is handled when the context id is known.
  EXPECT_EQ(peerFromId("a_to_b", "a_to_b_to_c.ch_basic"), "c");
  // Unnamed pipes and provisional ids name no peer.
  EXPECT_EQ(peerFromId("worker0", "worker0.p3.ch_basic"), "");
  EXPECT_EQ(peerFromId("worker0", "worker0[l0].c1"), "");
  EXPECT_EQ(instrument::contextIdFromId("worker0.ch_basic", "basic"), "worker0");
  EXPECT_EQ(instrument::contextIdFromId("worker0.tr_uv", "uv"), "worker0");
}

struct Exchange {
  // Sizes of the tensors of each message.
  std::vector<std::vector<std::size_t>> messages;
  double bytes() const {
    double total = 0;
    for (const auto& m : messages) {
      for (auto s : m) total += static_cast<double>(s);
    }
    return total;
  }
  double tensors() const {
    double total = 0;
    for (const auto& m : messages) total += static_cast<double>(m.size());
    return total;
  }
};

// Sends `exchange` from client to server, checking contents on arrival.
void run(Endpoint& client, Endpoint& server, const std::string& serverName,
         const Exchange& exchange) {
  const std::string url = server.listen();
  auto pipe = client.connect(url, serverName);
  auto accepted = server.accepted();
  std::uint8_t seed = 0;
  for (const auto& sizes : exchange.messages) {
    std::vector<Bytes> tensors;
    for (auto size : sizes) tensors.push_back(testing::pattern(size, seed++));
    // Concurrently: a write completes only once the peer has read (cma pulls,
    // big basic writes wait for the socket to drain).
    auto received =
        std::async(std::launch::async, [&] { return testing::receiveTensors(*accepted); });
    testing::sendTensors(*pipe, tensors);
    ASSERT_EQ(received.get(), tensors);
  }
  pipe->close();
  accepted->close();
}

class ChannelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChannelTest, CountsEqualWhatWasSent) {
  const std::string channel = GetParam();
  metrics::Metrics clientMetrics;
  metrics::Metrics serverMetrics;
  const Exchange exchange{{{1}, {4096, 3}, {1 << 20}, {0, 17, 65536}}};
  {
    Endpoint server(EndpointOptions{"server", {channel}, "uv", &serverMetrics.channels()});
    Endpoint client(EndpointOptions{"client", {channel}, "uv", &clientMetrics.channels()});
    run(client, server, "server", exchange);
  }
  const std::map<std::string, std::string> sent{{"channel", channel},
                                                {"direction", "send"},
                                                {"peer", "server"},
                                                {"local_device", "cpu"},
                                                {"remote_device", "cpu"}};
  const std::map<std::string, std::string> received{{"channel", channel},
                                                    {"direction", "recv"},
                                                    {"peer", "client"},
                                                    {"local_device", "cpu"},
                                                    {"remote_device", "cpu"}};
  EXPECT_EQ(value(clientMetrics, "rpcjob_channel_transfers_total", sent), exchange.tensors());
  EXPECT_EQ(value(clientMetrics, "rpcjob_channel_bytes_total", sent), exchange.bytes());
  EXPECT_EQ(value(clientMetrics, "rpcjob_channel_errors_total", sent), 0);
  EXPECT_EQ(value(clientMetrics, "rpcjob_channel_transfer_duration_seconds", sent),
            exchange.tensors());
  EXPECT_EQ(value(serverMetrics, "rpcjob_channel_transfers_total", received), exchange.tensors());
  EXPECT_EQ(value(serverMetrics, "rpcjob_channel_bytes_total", received), exchange.bytes());
  // Nothing flowed the other way, and no transfer went unattributed.
  EXPECT_EQ(value(clientMetrics, "rpcjob_channel_transfers_total", {{"direction", "recv"}}), -1);
  EXPECT_EQ(value(serverMetrics, "rpcjob_channel_transfers_total", {{"direction", "send"}}), -1);
  EXPECT_EQ(value(clientMetrics, "rpcjob_channel_transfers_total", {{"peer", "unknown"}}), -1);
  // The transport carried at least the descriptors (and, for basic, the data).
  EXPECT_GT(value(clientMetrics, "rpcjob_transport_bytes_total",
                  {{"transport", "uv"}, {"direction", "send"}, {"peer", "server"}}),
            0);
  EXPECT_GE(value(serverMetrics, "rpcjob_transport_connections_total",
                  {{"transport", "uv"}, {"peer", "client"}}),
            2);
  if (channel == "basic") {
    EXPECT_GE(value(clientMetrics, "rpcjob_transport_bytes_total",
                    {{"transport", "uv"}, {"direction", "send"}, {"peer", "server"}}),
              exchange.bytes());
  }
  // Every byte one side's transport wrote, the other side's read (payload reads
  // and writes are counted when issued, descriptor reads when done).
  EXPECT_EQ(value(clientMetrics, "rpcjob_transport_bytes_total",
                  {{"transport", "uv"}, {"direction", "send"}, {"peer", "server"}}),
            value(serverMetrics, "rpcjob_transport_bytes_total",
                  {{"transport", "uv"}, {"direction", "recv"}, {"peer", "client"}}));
  EXPECT_EQ(value(serverMetrics, "rpcjob_transport_bytes_total",
                  {{"transport", "uv"}, {"direction", "send"}, {"peer", "client"}}),
            value(clientMetrics, "rpcjob_transport_bytes_total",
                  {{"transport", "uv"}, {"direction", "recv"}, {"peer", "server"}}));
}

// xth only where TensorPipe exports it: Debian's does, the one inside PyTorch's libtorch (the
// GPU build) does not.
#if RPCJOB_HAS_XTH_CHANNEL
#define RPCJOB_TEST_CHANNELS "basic", "cma", "xth"
#else
#define RPCJOB_TEST_CHANNELS "basic", "cma"
#endif
INSTANTIATE_TEST_SUITE_P(Channels, ChannelTest, ::testing::Values(RPCJOB_TEST_CHANNELS),
                         [](const auto& info) { return info.param; });

// A peer without decorators interoperates with one that has them, both ways
// round (the instrumented side listening, then connecting).
TEST(Interop, PlainPeerTalksToInstrumentedPeer) {
  for (bool instrumentedServer : {true, false}) {
    metrics::Metrics m;
    const Exchange exchange{{{100, 200}, {300}}};
    {
      Endpoint server(EndpointOptions{
          "server", {"cma", "basic"}, "uv", instrumentedServer ? &m.channels() : nullptr});
      Endpoint client(EndpointOptions{
          "client", {"cma", "basic"}, "uv", instrumentedServer ? nullptr : &m.channels()});
      run(client, server, "server", exchange);
    }
    const std::map<std::string, std::string> labels =
        instrumentedServer ? std::map<std::string, std::string>{{"channel", "cma"},
                                                                {"direction", "recv"},
                                                                {"peer", "client"}}
                           : std::map<std::string, std::string>{
                                 {"channel", "cma"}, {"direction", "send"}, {"peer", "server"}};
    EXPECT_EQ(value(m, "rpcjob_channel_transfers_total", labels), exchange.tensors());
    EXPECT_EQ(value(m, "rpcjob_channel_bytes_total", labels), exchange.bytes());
  }
}

// Over the shm transport, with the peer label turned off.
TEST(PeerLabel, OffDropsThePeer) {
  metrics::MetricsOptions options;
  options.peerLabel = false;
  metrics::Metrics m(options);
  const Exchange exchange{{{64}, {64}}};
  {
    Endpoint server(EndpointOptions{"server", {"basic"}, "shm", &m.channels()});
    Endpoint client(EndpointOptions{"client", {"basic"}, "shm", nullptr});
    run(client, server, "server", exchange);
  }
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total",
                  {{"channel", "basic"}, {"direction", "recv"}, {"peer", ""}}),
            exchange.tensors());
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total", {{"peer", "client"}}), -1);
  EXPECT_GT(value(m, "rpcjob_transport_bytes_total",
                  {{"transport", "shm"}, {"direction", "recv"}, {"peer", ""}}),
            0);
}

// Device maps label the remote side; a pipe without names counts as "unknown".
TEST(Labels, UnnamedPipeIsUnknownPeer) {
  metrics::Metrics m;
  {
    Endpoint server(EndpointOptions{"", {"basic"}, "uv", nullptr});
    Endpoint client(EndpointOptions{"", {"basic"}, "uv", &m.channels()});
    run(client, server, "", Exchange{{{8}}});
  }
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total", {{"peer", "unknown"}}), 1);
}

TEST(Labels, DeviceMapNamesTheRemoteDevice) {
  metrics::Metrics m;
  m.channels().setDeviceMap("peer", {{"cuda:0", "cuda:1"}});
  EXPECT_EQ(m.channels().remoteDevice("peer", "cuda:0"), "cuda:1");
  EXPECT_EQ(m.channels().remoteDevice("peer", "cuda:3"), "unknown");
  EXPECT_EQ(m.channels().remoteDevice("other", "cpu"), "cpu");
}

// The timing seam: a TransferTimer replaces the steady-clock measurement, and
// may report later (as a CUDA-event timer would), from another thread.
struct FakeTimer : instrument::TransferTimer {
  std::uint64_t begun = 0;
  std::vector<std::pair<std::uint64_t, instrument::TransferReport>> pending;
  std::uint64_t begin(const tensorpipe::Buffer& buffer) noexcept override {
    EXPECT_EQ(buffer.device().type, tensorpipe::kCpuDeviceType);
    return ++begun;
  }
  void end(std::uint64_t token, instrument::TransferReport report) noexcept override {
    pending.emplace_back(token, report);  // report later, like an event poller
  }
};

TEST(TransferTimer, ReportsWhenTheTimerSays) {
  metrics::Metrics m;
  auto timer = std::make_shared<FakeTimer>();
  auto inner = std::make_shared<ImmediateContext>();
  auto context = instrument::instrumentChannel("cuda_ipc", inner, m.channels(), timer);
  context->setId("w0.ch_cuda_ipc");
  auto channel = context->createChannel({}, tensorpipe::channel::Endpoint::kConnect);
  channel->setId("w0_to_w1.ch_cuda_ipc");
  std::uint64_t data = 0;
  int callbacks = 0;
  for (int i = 0; i < 3; ++i) {
    channel->send(tensorpipe::CpuBuffer{&data}, 8, [&](const tensorpipe::Error&) { ++callbacks; });
  }
  inner->channel->fail = true;
  channel->send(tensorpipe::CpuBuffer{&data}, 8, [&](const tensorpipe::Error&) { ++callbacks; });
  const std::map<std::string, std::string> labels{
      {"channel", "cuda_ipc"}, {"direction", "send"}, {"peer", "w1"}};
  // The callbacks ran at once; nothing is recorded until the timer reports.
  EXPECT_EQ(callbacks, 4);
  EXPECT_EQ(timer->begun, 4u);
  ASSERT_EQ(timer->pending.size(), 3u);  // the failed transfer never reaches end()
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total", labels), 0);
  EXPECT_EQ(value(m, "rpcjob_channel_errors_total", labels), 1);
  std::thread poller([&] {
    for (auto& [token, report] : timer->pending) report(0.5 * static_cast<double>(token));
  });
  poller.join();
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total", labels), 3);
  EXPECT_EQ(value(m, "rpcjob_channel_bytes_total", labels), 24);
  for (const auto& family : m.collect()) {
    if (family.name == "rpcjob_channel_transfer_duration_seconds") {
      EXPECT_DOUBLE_EQ(family.metric.at(0).histogram.sample_sum, 0.5 + 1.0 + 1.5);
    }
  }
}

// What the transport decorator counts, and when: payload reads and writes when
// issued, reads that learn their length (read(fn), descriptors) when done, and
// errors from those reads; paused, nothing, and every callback still runs.
TEST(Transport, CountsWhenIssuedAndErrorsOnFailedReads) {
  metrics::Metrics m;
  auto inner = std::make_shared<ImmediateTransport>();
  auto context = instrument::instrumentTransport("shm", inner, m.channels());
  context->setId("w0.tr_shm");
  auto connection = context->connect("");
  connection->setId("w0_to_w1.tr_shm");
  const std::map<std::string, std::string> sent{
      {"transport", "shm"}, {"direction", "send"}, {"peer", "w1"}};
  const std::map<std::string, std::string> received{
      {"transport", "shm"}, {"direction", "recv"}, {"peer", "w1"}};
  const std::map<std::string, std::string> errors{{"transport", "shm"}, {"peer", "w1"}};
  char buffer[64];
  int callbacks = 0;
  auto onWrite = [&](const tensorpipe::Error&) { ++callbacks; };
  auto onRead = [&](const tensorpipe::Error&, const void*, size_t) { ++callbacks; };
  connection->write(buffer, 10, onWrite);
  connection->write(buffer, 20, onWrite);
  connection->read(buffer, 7, onRead);
  connection->read(onRead);  // the connection hands over kReadBytes (5)
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", sent), 30);
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", received), 12);

  metrics::setRecording(false);
  connection->write(buffer, 1000, onWrite);
  connection->read(buffer, 1000, onRead);
  connection->read(onRead);
  metrics::setRecording(true);
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", sent), 30);
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", received), 12);

  // A descriptor (nop object) is counted when read, from its encoded size.
  tensorpipe::NopHolder<std::uint64_t> descriptor;
  auto onNop = [&](const tensorpipe::Error&) { ++callbacks; };
  connection->read(descriptor, onNop);
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", received),
            12 + static_cast<double>(descriptor.getSize()));

  inner->connection->fail = true;
  connection->read(onRead);
  EXPECT_EQ(value(m, "rpcjob_transport_errors_total", errors), 1);
  connection->read(descriptor, onNop);
  EXPECT_EQ(value(m, "rpcjob_transport_errors_total", errors), 2);
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", received),
            12 + static_cast<double>(descriptor.getSize()));
  EXPECT_EQ(callbacks, 10);
}

// Paused, the channel decorator forwards: the transfer happens, nothing is counted.
TEST(Recording, PausedChannelRecordsNothing) {
  metrics::Metrics m;
  auto inner = std::make_shared<ImmediateContext>();
  auto context = instrument::instrumentChannel("basic", inner, m.channels());
  context->setId("w0.ch_basic");
  auto channel = context->createChannel({}, tensorpipe::channel::Endpoint::kConnect);
  channel->setId("w0_to_w1.ch_basic");
  std::uint64_t data = 0;
  int callbacks = 0;
  metrics::setRecording(false);
  channel->send(tensorpipe::CpuBuffer{&data}, 8, [&](const tensorpipe::Error&) { ++callbacks; });
  metrics::setRecording(true);
  channel->send(tensorpipe::CpuBuffer{&data}, 8, [&](const tensorpipe::Error&) { ++callbacks; });
  EXPECT_EQ(callbacks, 2);
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total",
                  {{"channel", "basic"}, {"direction", "send"}, {"peer", "w1"}}),
            1);
}

// Each recorder pauses on its own (rpcjob-bench --metrics --recorders): a
// channel records while the others are paused, and not while it is.
TEST(Recording, RecordersPauseOneAtATime) {
  using metrics::Recorder;
  metrics::Metrics m;
  auto context =
      instrument::instrumentChannel("basic", std::make_shared<ImmediateContext>(), m.channels());
  context->setId("w0.ch_basic");
  auto channel = context->createChannel({}, tensorpipe::channel::Endpoint::kConnect);
  channel->setId("w0_to_w1.ch_basic");
  auto transports =
      instrument::instrumentTransport("shm", std::make_shared<ImmediateTransport>(), m.channels());
  transports->setId("w0.tr_shm");
  auto connection = transports->connect("");
  connection->setId("w0_to_w1.tr_shm");
  std::uint64_t data = 0;
  auto send = [&] {
    channel->send(tensorpipe::CpuBuffer{&data}, 8, [](const tensorpipe::Error&) {});
  };
  auto write = [&] { connection->write(&data, 8, [](const tensorpipe::Error&) {}); };
  const std::map<std::string, std::string> transfers{
      {"channel", "basic"}, {"direction", "send"}, {"peer", "w1"}};
  const std::map<std::string, std::string> sent{
      {"transport", "shm"}, {"direction", "send"}, {"peer", "w1"}};

  metrics::setRecording(metrics::kAllRecorders & ~static_cast<unsigned>(Recorder::kObserver));
  send();
  write();
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total", transfers), 1);
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", sent), 8);
  metrics::setRecording(static_cast<unsigned>(Recorder::kTransports));
  send();
  write();
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total", transfers), 1);
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", sent), 16);
  metrics::setRecording(static_cast<unsigned>(Recorder::kChannels));
  send();
  write();
  metrics::setRecording(true);
  EXPECT_EQ(value(m, "rpcjob_channel_transfers_total", transfers), 2);
  EXPECT_EQ(value(m, "rpcjob_transport_bytes_total", sent), 16);
}

}  // namespace
}  // namespace rpcjob
