// The per-pair derivation (pair_links.h): the rules for every kind of pair, and
// the properties every derived table has, checked over every pair of small tables.

#include "rpcjob/assignment/pair_links.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

namespace rpcjob {
namespace {

using Strings = std::vector<std::string>;

WorkerEntry worker(const std::string& name, int rank, const std::string& node,
                   const std::string& pod, std::vector<int> gpus) {
  return WorkerEntry{name, rank, "g", "h:" + std::to_string(1000 + rank), 0, node, pod, gpus, {}};
}

TEST(PairLinks, SamePod) {
  const PairLink gpu = linkFor({true, false, true}, {}, {});
  EXPECT_EQ(gpu.transports, (Strings{"shm", "uv"}));
  EXPECT_EQ(gpu.channels,
            (Strings{"cuda_nvlink", "cuda_ipc", "cuda_basic", "rpcjob_cma", "cma", "basic"}));
  EXPECT_TRUE(gpu.hasCudaChannel);
  EXPECT_TRUE(gpu.uses("shm") && gpu.uses("cma") && !gpu.uses("mpt"));
  // RDMA does not matter inside a pod.
  EXPECT_EQ(linkFor({true, true, true}, {}, {}).channels, gpu.channels);
  const PairLink cpu = linkFor({true, false, false}, {}, {});
  EXPECT_EQ(cpu.channels, (Strings{"rpcjob_cma", "cma", "basic"}));
  EXPECT_FALSE(cpu.hasCudaChannel);
}

TEST(PairLinks, AcrossPods) {
  const PairLink plain = linkFor({false, false, true}, {}, {});
  EXPECT_EQ(plain.transports, (Strings{"uv"}));
  EXPECT_EQ(plain.channels, (Strings{"cuda_basic", "mpt", "basic"}));
  const PairLink rdma = linkFor({false, true, true}, {}, {});
  EXPECT_EQ(rdma.transports, (Strings{"ibv", "uv"}));
  EXPECT_EQ(rdma.channels, (Strings{"cuda_gdr", "cuda_basic", "mpt", "basic"}));
  EXPECT_EQ(linkFor({false, true, false}, {}, {}).channels, (Strings{"mpt", "basic"}));
  EXPECT_EQ(linkFor({false, false, false}, {}, {}).channels, (Strings{"mpt", "basic"}));
}

TEST(PairLinks, AllowedListsFilterAndOrder) {
  const PairLink l = linkFor({true, false, true}, {"uv"}, {"basic", "cuda_basic", "cma", "mpt"});
  EXPECT_EQ(l.transports, (Strings{"uv"}));
  EXPECT_EQ(l.channels, (Strings{"basic", "cuda_basic", "cma"}));
  const PairLink none = linkFor({false, false, true}, {"shm"}, {"cma"});
  EXPECT_TRUE(none.transports.empty());
  EXPECT_FALSE(none.hasCpuChannel);
  EXPECT_FALSE(none.hasCudaChannel);
}

// Every rule holds for all eight kinds of pair and several allowed lists.
TEST(PairLinks, ExhaustiveOverPlacesAndAllowedLists) {
  const std::vector<Strings> channelLists = {{},
                                             {"basic"},
                                             {"cuda_basic", "basic"},
                                             {"mpt", "cma", "basic"},
                                             {"cuda_ipc", "cuda_gdr", "cma"}};
  const std::set<std::string> cuda = {"cuda_nvlink", "cuda_ipc", "cuda_gdr", "cuda_basic"};
  for (int key = 0; key < 8; ++key) {
    const PairPlace p{(key & 4) != 0, (key & 2) != 0, (key & 1) != 0};
    for (const auto& allowed : channelLists) {
      const PairLink l = linkFor(p, {}, allowed);
      bool anyCuda = false, anyCpu = false;
      for (const auto& c : l.channels) {
        if (!allowed.empty()) {
          EXPECT_NE(std::find(allowed.begin(), allowed.end(), c), allowed.end());
        }
        EXPECT_NE(c, "xth");
        EXPECT_NE(c, "cuda_xth");
        (cuda.count(c) ? anyCuda : anyCpu) = true;
        if (!p.samePod) {
          EXPECT_TRUE(c != "cma" && c != "rpcjob_cma" && c != "cuda_ipc");
        }
        if (p.samePod) {
          EXPECT_TRUE(c != "mpt" && c != "cuda_gdr");
        }
        if (!p.bothRdma) {
          EXPECT_NE(c, "cuda_gdr");
        }
      }
      EXPECT_EQ(anyCuda, l.hasCudaChannel);
      EXPECT_EQ(anyCpu, l.hasCpuChannel);
      if (!p.bothGpus) {
        EXPECT_FALSE(l.hasCudaChannel);
      }
      EXPECT_EQ(l.uses("shm"), p.samePod);
      EXPECT_EQ(l.uses("ibv"), !p.samePod && p.bothRdma);
    }
  }
}

TEST(PairLinks, WhereTwoWorkersAre) {
  Assignment t;
  t.nodes["r1"] = {true, false};
  t.nodes["r2"] = {true, true};
  t.nodes["nvl"] = {false, true};
  const auto samePod = placeOf(t, worker("a", 0, "r1", "p", {0}), worker("b", 1, "r1", "p", {1}));
  EXPECT_TRUE(samePod.samePod && samePod.bothRdma && samePod.bothGpus);
  const auto sameNode = placeOf(t, worker("a", 0, "r1", "p", {0}), worker("b", 1, "r1", "q", {}));
  EXPECT_FALSE(sameNode.samePod);
  EXPECT_FALSE(sameNode.bothGpus);
  EXPECT_TRUE(placeOf(t, worker("a", 0, "r1", "p", {}), worker("b", 1, "r2", "q", {})).bothRdma);
  EXPECT_FALSE(placeOf(t, worker("a", 0, "r1", "p", {}), worker("b", 1, "nvl", "q", {})).bothRdma);
  EXPECT_FALSE(
      placeOf(t, worker("a", 0, "r1", "p", {}), worker("b", 1, "unlisted", "q", {})).bothRdma);
  // Locally (no pods) the workers of one machine share what a pod would.
  EXPECT_TRUE(placeOf(t, worker("a", 0, "local", "", {}), worker("b", 1, "local", "", {})).samePod);
  EXPECT_FALSE(placeOf(t, worker("a", 0, "m1", "", {}), worker("b", 1, "m2", "", {})).samePod);
}

TEST(PairLinks, NvlinkIsShownNotAChannelCondition) {
  // cuda_ipc and cuda_nvlink work over PCIe peer-to-peer too: the node's NVLink is
  // reported (plan notes), the channels of a pod's workers are the same.
  Assignment with, without;
  with.nodes["n"] = {false, true};
  for (Assignment* t : {&with, &without}) {
    t->workers = {worker("a", 0, "n", "p", {0}), worker("b", 1, "n", "p", {1})};
  }
  EXPECT_EQ(linkBetween(with, with.workers[0], with.workers[1]).channels,
            linkBetween(without, without.workers[0], without.workers[1]).channels);
  EXPECT_EQ(deviceMapBetween(with, with.workers[0], with.workers[1]),
            (DeviceMap{{"cuda:0", "cuda:1"}}));
}

TEST(PairLinks, AutoMapsTheKthGpuToTheKth) {
  Assignment t;
  t.workers = {worker("a", 0, "n", "p", {0, 1, 2}), worker("b", 1, "n", "p", {3, 4}),
               worker("c", 2, "m", "q", {0}), worker("cpu", 3, "n", "p", {})};
  EXPECT_EQ(deviceMapBetween(t, t.workers[0], t.workers[1]),
            (DeviceMap{{"cuda:0", "cuda:3"}, {"cuda:1", "cuda:4"}}));
  EXPECT_EQ(deviceMapBetween(t, t.workers[1], t.workers[0]),
            (DeviceMap{{"cuda:3", "cuda:0"}, {"cuda:4", "cuda:1"}}));
  EXPECT_EQ(deviceMapBetween(t, t.workers[2], t.workers[0]), (DeviceMap{{"cuda:0", "cuda:0"}}));
  EXPECT_TRUE(deviceMapBetween(t, t.workers[3], t.workers[0]).empty()) << "CPU-only";
  t.channels = {"mpt", "cma", "basic"};  // no cuda channel: tensors staged, no map
  EXPECT_TRUE(deviceMapBetween(t, t.workers[0], t.workers[1]).empty());
  t.channels = {"cuda_ipc", "cma", "basic"};  // cuda_ipc only inside a pod
  EXPECT_FALSE(deviceMapBetween(t, t.workers[0], t.workers[1]).empty());
  EXPECT_TRUE(deviceMapBetween(t, t.workers[0], t.workers[2]).empty());
  t.deviceMapMode = DeviceMapMode::Explicit;
  EXPECT_TRUE(deviceMapBetween(t, t.workers[0], t.workers[1]).empty());
}

TEST(PairLinks, ExplicitMapsOverrideAndTheirInverseServesTheOtherSide) {
  Assignment t;
  t.workers = {worker("a", 0, "n", "p", {0, 1}), worker("b", 1, "n", "p", {2, 3}),
               worker("c", 2, "n", "p", {4})};
  t.workers[0].explicitDeviceMaps["b"] = {{"cuda:0", "cuda:3"}, {"cuda:1", "cuda:2"}};
  EXPECT_EQ(deviceMapBetween(t, t.workers[0], t.workers[1]),
            (DeviceMap{{"cuda:0", "cuda:3"}, {"cuda:1", "cuda:2"}}));
  EXPECT_EQ(deviceMapBetween(t, t.workers[1], t.workers[0]),
            (DeviceMap{{"cuda:3", "cuda:0"}, {"cuda:2", "cuda:1"}}));
  EXPECT_EQ(deviceMapBetween(t, t.workers[0], t.workers[2]), (DeviceMap{{"cuda:0", "cuda:4"}}));
  t.deviceMapMode = DeviceMapMode::Explicit;
  EXPECT_EQ(
      deviceMapsOf(t, "a"),
      (std::map<std::string, DeviceMap>{{"b", {{"cuda:0", "cuda:3"}, {"cuda:1", "cuda:2"}}}}));
  EXPECT_EQ(deviceMapsOf(t, "b").size(), 1u);
  EXPECT_TRUE(deviceMapsOf(t, "c").empty());
  // Explicit maps hold even where the pair has no cuda channel (the user said so).
  t.channels = {"basic"};
  EXPECT_EQ(deviceMapsOf(t, "b").at("a").at("cuda:3"), "cuda:0");
}

// Over every pair of a small table with every kind of placement, both modes and
// several allowed lists: maps are one-to-one, each direction the inverse of the
// other, present exactly when the rules say, and a worker's row (what the runtime
// reads) agrees with the pair function (what the planner shows).
TEST(PairLinks, PropertiesOverEveryPairOfSmallTables) {
  const std::vector<Strings> channelLists = {
      {}, {"basic"}, {"cuda_basic", "mpt", "basic"}, {"cuda_ipc", "cma", "basic", "mpt"}};
  for (const auto mode : {DeviceMapMode::Auto, DeviceMapMode::Explicit}) {
    for (const auto& allowed : channelLists) {
      Assignment t;
      t.deviceMapMode = mode;
      t.channels = allowed;
      t.nodes["r1"] = {true, true};
      t.nodes["r2"] = {true, false};
      t.workers = {worker("a", 0, "r1", "p1", {0, 1}), worker("b", 1, "r1", "p1", {2}),
                   worker("c", 2, "r1", "p2", {0}),    worker("d", 3, "r2", "p3", {0, 1, 2}),
                   worker("e", 4, "plain", "p4", {0}), worker("f", 5, "plain", "p4", {}),
                   worker("g", 6, "r2", "p3", {})};
      t.workers[3].explicitDeviceMaps["e"] = {{"cuda:2", "cuda:0"}};
      for (const auto& a : t.workers) {
        const auto row = deviceMapsOf(t, a.name);
        const auto channels = channelsOf(t, a.name);
        EXPECT_EQ(channels.size(), t.workers.size() - 1);
        for (const auto& b : t.workers) {
          if (a.name == b.name) continue;
          const DeviceMap ab = deviceMapBetween(t, a, b);
          const DeviceMap ba = deviceMapBetween(t, b, a);
          DeviceMap inverse;
          for (const auto& [from, to] : ab) inverse[to] = from;
          EXPECT_EQ(inverse, ba) << a.name << "->" << b.name;
          EXPECT_EQ(inverse.size(), ab.size()) << "one-to-one";
          const bool given =
              a.explicitDeviceMaps.count(b.name) || b.explicitDeviceMaps.count(a.name);
          const PairLink link = linkBetween(t, a, b);
          const bool expected = given || (mode == DeviceMapMode::Auto && !a.gpus.empty() &&
                                          !b.gpus.empty() && link.hasCudaChannel);
          EXPECT_EQ(!ab.empty(), expected) << a.name << "->" << b.name;
          for (const auto& [from, to] : ab) {
            if (!given) {
              EXPECT_NE(std::find(a.gpus.begin(), a.gpus.end(), std::stoi(from.substr(5))),
                        a.gpus.end());
              EXPECT_NE(std::find(b.gpus.begin(), b.gpus.end(), std::stoi(to.substr(5))),
                        b.gpus.end());
            }
          }
          EXPECT_EQ(row.count(b.name) ? row.at(b.name) : DeviceMap{}, ab);
          EXPECT_EQ(channels.at(b.name), link.channels);
        }
      }
    }
  }
}

TEST(PairLinks, APerPairTableOfAnEarlierReleaseKeepsItsMaps) {
  // As tests/gpu/run-all.sh writes one: its maps are every map there is.
  const Assignment old = parseAssignment(
      "apiVersion: rpcjob.dev/v1alpha1\nkind: Assignment\nworkers:\n"
      "  - {name: w0, rank: 0, address: '127.0.0.1:1', node: local, gpus: [0],\n"
      "     deviceMaps: {w1: {'cuda:0': 'cuda:1'}}, channels: {w1: [cuda_ipc, cma]}}\n"
      "  - {name: w1, rank: 1, address: '127.0.0.1:2', node: local, gpus: [1],\n"
      "     deviceMaps: {w0: {'cuda:1': 'cuda:0'}}}\n"
      "  - {name: w2, rank: 2, address: '127.0.0.1:3', node: local, gpus: [2]}\n");
  EXPECT_EQ(deviceMapsOf(old, "w0"),
            (std::map<std::string, DeviceMap>{{"w1", {{"cuda:0", "cuda:1"}}}}));
  EXPECT_EQ(deviceMapsOf(old, "w1"),
            (std::map<std::string, DeviceMap>{{"w0", {{"cuda:1", "cuda:0"}}}}));
  EXPECT_TRUE(deviceMapsOf(old, "w2").empty()) << "no map in the old table: none now";
  // Its channels were informational; they are derived like any table's.
  EXPECT_EQ(channelsOf(old, "w0").at("w1").front(), "cuda_nvlink");
}

TEST(PairLinks, UnknownWorkerIsAnError) {
  Assignment t;
  t.workers = {worker("a", 0, "n", "", {})};
  EXPECT_THROW(deviceMapsOf(t, "ghost"), AssignmentError);
  EXPECT_THROW(channelsOf(t, "ghost"), AssignmentError);
  EXPECT_TRUE(deviceMapsOf(t, "a").empty());
}

}  // namespace
}  // namespace rpcjob
