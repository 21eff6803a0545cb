// cuda_nvlink's device descriptor (worker/src/cuda/nvlink_descriptor.h) and the
// receiver's map of its peers' GPUs, from which it tells a sender on its own GPU
// from one across NVLink. Pure logic: runs without CUDA.
#include "cuda/nvlink_descriptor.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace rpcjob::runtime::cuda {
namespace {

NvlinkDescriptor gpu(int pid, int index, const std::string& bus) {
  NvlinkDescriptor d;
  d.boot = "b00t";
  d.pid = pid;
  d.bus = bus;
  d.peers = {"00000000:2A:00.0", "00000000:3B:00.0"};
  d.index = index;
  return d;
}

TEST(NvlinkDescriptor, RoundTrips) {
  NvlinkDescriptor back;
  ASSERT_TRUE(decodeNvlinkDescriptor(encodeNvlinkDescriptor(gpu(42, 3, "00000000:19:00.0")), back));
  EXPECT_EQ(back.boot, "b00t");
  EXPECT_EQ(back.pid, 42);
  EXPECT_EQ(back.bus, "00000000:19:00.0");
  EXPECT_EQ(back.peers, (std::vector<std::string>{"00000000:2A:00.0", "00000000:3B:00.0"}));
  EXPECT_EQ(back.index, 3);
}

TEST(NvlinkDescriptor, WithoutPeersTheIndexStaysInItsField) {
  NvlinkDescriptor d = gpu(7, 1, "00000000:19:00.0");
  d.peers.clear();
  NvlinkDescriptor back;
  ASSERT_TRUE(decodeNvlinkDescriptor(encodeNvlinkDescriptor(d), back));
  EXPECT_TRUE(back.peers.empty());
  EXPECT_EQ(back.index, 1);
}

TEST(NvlinkDescriptor, ReadsWhatOlderPeersSend) {
  // Before the index: "boot|pid|bus|peers", or without peers "boot|pid|bus|".
  NvlinkDescriptor d;
  ASSERT_TRUE(decodeNvlinkDescriptor("b00t|42|00000000:19:00.0|00000000:2A:00.0", d));
  EXPECT_EQ(d.peers, std::vector<std::string>{"00000000:2A:00.0"});
  EXPECT_EQ(d.index, -1);
  ASSERT_TRUE(decodeNvlinkDescriptor("b00t|42|00000000:19:00.0|", d));
  EXPECT_TRUE(d.peers.empty());
  EXPECT_EQ(d.index, -1);
}

TEST(NvlinkDescriptor, OlderPeersReadTheirFieldsUnchanged) {
  // An older peer splits on '|' and reads fields 0-3: the index comes after them.
  const std::string text = encodeNvlinkDescriptor(gpu(42, 3, "00000000:19:00.0"));
  EXPECT_EQ(text.rfind("b00t|42|00000000:19:00.0|00000000:2A:00.0,00000000:3B:00.0|", 0), 0u)
      << text;
}

TEST(NvlinkDescriptor, RejectsWhatIsNotOne) {
  NvlinkDescriptor d = gpu(1, 0, "kept");
  EXPECT_FALSE(decodeNvlinkDescriptor("", d));
  EXPECT_FALSE(decodeNvlinkDescriptor("b00t|42", d));
  EXPECT_FALSE(decodeNvlinkDescriptor("b00t|pid|bus|", d));
  EXPECT_FALSE(decodeNvlinkDescriptor("b00t|42|bus||x", d));
  EXPECT_FALSE(decodeNvlinkDescriptor("b00t|42x|bus|", d));
  EXPECT_EQ(d.bus, "kept");  // untouched by a failed decode
}

TEST(PeerGpus, NamesTheGpuOfAProcessesIndex) {
  PeerGpus gpus;
  // Two processes whose cuda:0 are different GPUs (CUDA_VISIBLE_DEVICES=1,0 in one).
  gpus.learn(gpu(100, 0, "00000000:19:00.0"));
  gpus.learn(gpu(100, 1, "00000000:2A:00.0"));
  gpus.learn(gpu(200, 0, "00000000:2A:00.0"));
  EXPECT_EQ(gpus.busOf(100, 0), "00000000:19:00.0");
  EXPECT_EQ(gpus.busOf(100, 1), "00000000:2A:00.0");
  EXPECT_EQ(gpus.busOf(200, 0), "00000000:2A:00.0");
  EXPECT_EQ(gpus.busOf(200, 1), std::nullopt);
  EXPECT_EQ(gpus.busOf(300, 0), std::nullopt);
}

TEST(PeerGpus, IgnoresDescriptorsWithoutAnIndexOrBus) {
  PeerGpus gpus;
  gpus.learn(gpu(100, -1, "00000000:19:00.0"));  // an older peer
  gpus.learn(gpu(100, 0, ""));
  EXPECT_EQ(gpus.busOf(100, -1), std::nullopt);
  EXPECT_EQ(gpus.busOf(100, 0), std::nullopt);
}

TEST(PeerGpus, ALaterDescriptorOfTheSameProcessReplacesTheEarlier) {
  // A pid reused by a new process on the same host.
  PeerGpus gpus;
  gpus.learn(gpu(100, 0, "00000000:19:00.0"));
  gpus.learn(gpu(100, 0, "00000000:2A:00.0"));
  EXPECT_EQ(gpus.busOf(100, 0), "00000000:2A:00.0");
}

TEST(PeerGpus, LearnsAndAnswersFromManyThreads) {
  PeerGpus gpus;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        gpus.learn(gpu(t, i % 8, "bus" + std::to_string(i % 8)));
        (void)gpus.busOf((t + 1) % 4, i % 8);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(gpus.busOf(t, 5), "bus5");
}

}  // namespace
}  // namespace rpcjob::runtime::cuda
