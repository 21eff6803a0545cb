// The device map table (worker/src/cuda/device_maps.h) is pure logic and
// builds without CUDA: its checks, and the targets each message reads by rank
// without a lock -- the same entries the name-keyed lookups give, replaced
// when a handshake brings news, the old ones still readable.
#include "cuda/device_maps.h"

#include <gtest/gtest.h>

#include "rpcjob/runtime/errors.h"

namespace rpcjob::runtime::cuda {
namespace {

const std::vector<std::string> kWorkers = {"a", "b", "c"};  // ranks 0, 1, 2

// The handshake entry `caller` sends with its map to `to`.
wire::ChannelDescriptors helloWithMap(const std::string& to, const std::string& map) {
  return {{DeviceMapTable::kHandshakeEntry, {{"devices", "2"}, {"map:" + to, map}}}};
}

TEST(DeviceMapTable, TargetsByRankAreTheNamedEntries) {
  DeviceMapTable t;
  t.init("a", kWorkers, {{"b", {{"cuda:0", "cuda:1"}, {"cpu", "cuda:0"}}}}, 2);
  const DeviceTargets* toB = t.requestTargets(1);
  ASSERT_NE(toB, nullptr);
  EXPECT_EQ(toB, t.forRequest("b").get());
  EXPECT_EQ(toB->peer, "b");
  EXPECT_EQ(toB->direction, "request");
  EXPECT_EQ(toB->map, (std::map<int, int>{{-1, 0}, {0, 1}}));
  // A peer without a map: an empty entry, the same one every time.
  const DeviceTargets* toC = t.requestTargets(2);
  ASSERT_NE(toC, nullptr);
  EXPECT_TRUE(toC->map.empty());
  EXPECT_EQ(toC->peer, "c");
  EXPECT_EQ(toC, t.requestTargets(2));
  EXPECT_EQ(toC, t.forRequest("c").get());
  const DeviceTargets* fromC = t.responseTargets(2);
  ASSERT_NE(fromC, nullptr);
  EXPECT_EQ(fromC->direction, "response");
  EXPECT_TRUE(fromC->map.empty());
  // No such rank.
  EXPECT_EQ(t.requestTargets(-1), nullptr);
  EXPECT_EQ(t.requestTargets(3), nullptr);
  EXPECT_EQ(t.responseTargets(7), nullptr);
}

TEST(DeviceMapTable, HandshakesReplaceTheTargetsAndKeepTheOldReadable) {
  DeviceMapTable t;
  t.init("a", kWorkers, {{"b", {{"cuda:0", "cuda:1"}}}}, 2);
  const DeviceTargets* before = t.responseTargets(2);
  t.onCallerDescriptors("c", helloWithMap("a", "cuda:1=cuda:0"));
  const DeviceTargets* after = t.responseTargets(2);
  ASSERT_NE(after, before);
  EXPECT_EQ(after, t.forResponse("c").get());
  EXPECT_EQ(after->map, (std::map<int, int>{{0, 1}}));  // the caller's map, inverted
  EXPECT_TRUE(before->map.empty());                     // still there for a reader that held it

  // b turns out to have one GPU: our map to its cuda:1 is now an error, for
  // every message to b.
  const DeviceTargets* toB = t.requestTargets(1);
  EXPECT_FALSE(t.onPeerDeviceCount("b", 1).empty());
  ASSERT_NE(t.requestTargets(1), toB);
  EXPECT_NE(t.requestTargets(1)->error.find("has 1 CUDA device"), std::string::npos)
      << t.requestTargets(1)->error;
  EXPECT_EQ(t.requestTargets(1), t.forRequest("b").get());
  EXPECT_TRUE(toB->error.empty());
}

TEST(DeviceMapTable, BadMapsAreClearErrors) {
  DeviceMapTable t;
  EXPECT_THROW(t.init("a", kWorkers, {{"z", {{"cuda:0", "cuda:0"}}}}, 1), RpcError);
  EXPECT_THROW(t.init("a", kWorkers, {{"a", {{"cuda:0", "cuda:0"}}}}, 1), RpcError);
  EXPECT_THROW(t.init("a", kWorkers, {{"b", {{"cuda:3", "cuda:0"}}}}, 1), RpcError);
  EXPECT_THROW(t.init("a", kWorkers, {{"b", {{"cuda:0", "cuda:0"}, {"cpu", "cuda:0"}}}}, 1),
               RpcError);
}

}  // namespace
}  // namespace rpcjob::runtime::cuda
