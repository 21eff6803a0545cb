// The per-pair channels and device maps of a plan stay what the per-pair planner
// produced (it wrote them into the worker table for every ordered pair; the
// compact table derives them). tests/planner/golden/pairs.txt was written by the
// per-pair planner (commit "planner: golden of today's per-pair channels and
// device maps") over the examples and a few jobs that exercise every rule, on
// several clusters, for both targets. RPCJOB_UPDATE_GOLDEN=1 rewrites it: do that
// only for an intended change of the rules, and say so in the commit.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "pair_text.h"
#include "rpcjob/api/parse.h"
#include "rpcjob/planner/plan.h"
#include "test_support.h"

namespace rpcjob::planner {
namespace {

using testing::gpuNode;

const std::string kGolden = std::string(RPCJOB_SOURCE_DIR) + "/tests/planner/golden/pairs.txt";

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

api::RpcJob parsed(const std::string& text) {
  const auto r = api::parseRpcJob(text);
  if (!r.ok()) throw std::runtime_error(api::formatErrors(r.errors));
  return r.job;
}

std::string groupYaml(const std::string& name, int replicas, int gpus) {
  return "    - name: " + name + "\n      replicas: " + std::to_string(replicas) +
         "\n      gpusPerWorker: " + std::to_string(gpus) +
         "\n      template: {spec: {containers: [{name: w, image: i, resources: {requests: "
         "{cpu: 100m, memory: 64Mi}}}]}}\n";
}

// Jobs that exercise every rule: CPU and GPU groups, several GPUs per worker,
// explicit maps in both modes, channel and transport restrictions.
std::vector<std::pair<std::string, api::RpcJob>> jobs() {
  std::vector<std::pair<std::string, api::RpcJob>> out;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(RPCJOB_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    out.emplace_back(entry.path().filename().string(), parsed(readFile(entry.path())));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::string head = "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: j}\n";
  const std::string mixed = "spec:\n  workers:\n" + groupYaml("ps", 1, 0) +
                            groupYaml("trainer", 3, 2) + groupYaml("eval", 1, 1);
  out.emplace_back("mixed", parsed(head + mixed));
  out.emplace_back("explicit-maps",
                   parsed(head + mixed +
                          "  deviceMaps:\n    mode: Explicit\n    maps:\n"
                          "      - {from: trainer0, to: trainer1, devices: {'cuda:1': 'cuda:0'}}\n"
                          "      - {from: eval, to: trainer2, devices: {'cuda:0': 'cuda:1'}}\n"
                          "      - {from: trainer2, to: eval, devices: {'cuda:1': 'cuda:0'}}\n"));
  out.emplace_back("auto-with-override",
                   parsed(head + mixed +
                          "  deviceMaps:\n    mode: Auto\n    maps:\n"
                          "      - {from: trainer1, to: trainer0, devices: {'cuda:0': 'cuda:1', "
                          "'cuda:1': 'cuda:0'}}\n"));
  out.emplace_back("cuda-basic-first",
                   parsed(head + mixed + "  channels: [cuda_basic, basic, cuda_ipc, cma, mpt]\n"));
  out.emplace_back("no-cuda-channel",
                   parsed(head + mixed + "  channels: [mpt, cma, basic]\n  transports: [uv]\n"));
  return out;
}

std::vector<std::pair<std::string, ClusterView>> clusters() {
  Node nvlink = gpuNode("nvl", 8);
  nvlink.labels[kNvlinkLabel] = "true";
  return {
      {"one-nvlink-node", testing::cluster({nvlink})},
      {"rdma-2x4", testing::cluster({gpuNode("r1", 4, true), gpuNode("r2", 4, true)})},
      {"plain-4x2",
       testing::cluster({gpuNode("p1", 2), gpuNode("p2", 2), gpuNode("p3", 2), gpuNode("p4", 2)})},
      {"half-rdma",
       testing::cluster({gpuNode("h1", 4, true), gpuNode("h2", 4), gpuNode("h3", 4, true)})},
  };
}

// Every plan of every job, cluster, placement and target, as text.
std::string allPairs() {
  std::ostringstream out;
  for (const auto& [jobName, base] : jobs()) {
    for (auto perPod : {api::WorkersPerPod::One, api::WorkersPerPod::Auto}) {
      for (auto policy : {api::PlacementPolicy::Pack, api::PlacementPolicy::Spread}) {
        api::RpcJob job = base;
        job.spec.placement.workersPerPod = perPod;
        job.spec.placement.policy = policy;
        const std::string variant =
            jobName + (perPod == api::WorkersPerPod::Auto ? " perPod=Auto" : " perPod=1") +
            (policy == api::PlacementPolicy::Pack ? " Pack" : " Spread");
        for (const auto& [clusterName, cluster] : clusters()) {
          out << "== " << variant << " on " << clusterName << "\n"
              << testing::pairText(planJob(job, cluster));
        }
        if (policy == api::PlacementPolicy::Pack && perPod == api::WorkersPerPod::One) {
          PlanOptions local;
          local.target = Target::Local;
          out << "== " << jobName << " locally\n"
              << testing::pairText(planJob(job, localCluster(16, 64000, int64_t{64} << 30), local));
        }
      }
    }
  }
  return out.str();
}

TEST(PairEquivalence, SameChannelsAndDeviceMapsAsThePerPairPlanner) {
  const std::string now = allPairs();
  if (std::getenv("RPCJOB_UPDATE_GOLDEN")) {
    std::ofstream(kGolden) << now;
    GTEST_SKIP() << "rewrote " << kGolden;
  }
  const std::string golden = readFile(kGolden);
  ASSERT_FALSE(golden.empty()) << kGolden << " is missing";
  // Line by line, so a difference names the plan and the pair.
  std::istringstream a(golden), b(now);
  std::string la, lb, section;
  int line = 0;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, la));
    const bool gb = static_cast<bool>(std::getline(b, lb));
    ++line;
    if (!ga && !gb) break;
    if (ga && la.rfind("== ", 0) == 0) section = la;
    ASSERT_EQ(ga ? la : "<end>", gb ? lb : "<end>")
        << "line " << line << " in " << section
        << ". A new example adds sections: rewrite the golden with RPCJOB_UPDATE_GOLDEN=1 and "
           "check "
           "that `git diff` only adds lines; a changed line is a changed rule.";
  }
}

}  // namespace
}  // namespace rpcjob::planner
