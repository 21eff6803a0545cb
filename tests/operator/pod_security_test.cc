// pod_security.h: restricted defaults where the template is silent, the
// template's fields winning one by one, the plan's capabilities bounded by the
// namespace's Pod Security level, and the links a level leaves out.

#include "rpcjob/operator/pod_security.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "restricted_check.h"
#include "rpcjob/api/vocabulary.h"

namespace rpcjob::op {
namespace {

using Level = PodSecurityLevel;
const Level kLevels[] = {Level::Privileged, Level::Baseline, Level::Restricted};

std::vector<std::string> seq(const YAML::Node& n) {
  std::vector<std::string> out;
  for (const auto& x : n) out.push_back(x.Scalar());
  return out;
}

// The two contexts as a one-container pod, for the restricted checker.
YAML::Node asPod(const PodSecurityResult& r) {
  YAML::Node pod;
  pod["spec"]["securityContext"] = YAML::Load(r.podSecurityContext);
  YAML::Node c;
  c["name"] = "worker";
  c["securityContext"] = YAML::Load(r.containerSecurityContext);
  pod["spec"]["containers"].push_back(c);
  return pod;
}

TEST(PodSecurityLevel, ReadsTheEnforceLabelAndTreatsUnknownValuesAsRestricted) {
  EXPECT_EQ(podSecurityLevel(""), Level::Privileged);
  EXPECT_EQ(podSecurityLevel("privileged"), Level::Privileged);
  EXPECT_EQ(podSecurityLevel("baseline"), Level::Baseline);
  EXPECT_EQ(podSecurityLevel("restricted"), Level::Restricted);
  EXPECT_EQ(podSecurityLevel("Restricted"), Level::Restricted);
  EXPECT_EQ(podSecurityLevel("bogus"), Level::Restricted);
  for (Level l : kLevels) EXPECT_EQ(podSecurityLevel(toString(l)), l);
}

TEST(PodSecurityLevel, CapabilitiesEachLevelLetsAContainerAdd) {
  for (const char* cap : {"SYS_PTRACE", "IPC_LOCK", "NET_BIND_SERVICE", "CHOWN", "SYS_ADMIN"}) {
    EXPECT_TRUE(capabilityAllowed(Level::Privileged, cap)) << cap;
  }
  EXPECT_TRUE(capabilityAllowed(Level::Baseline, "NET_BIND_SERVICE"));
  EXPECT_TRUE(capabilityAllowed(Level::Baseline, "CHOWN"));
  EXPECT_FALSE(capabilityAllowed(Level::Baseline, "SYS_PTRACE"));
  EXPECT_FALSE(capabilityAllowed(Level::Baseline, "IPC_LOCK"));
  EXPECT_FALSE(capabilityAllowed(Level::Baseline, "SYS_ADMIN"));
  EXPECT_TRUE(capabilityAllowed(Level::Restricted, "NET_BIND_SERVICE"));
  for (const char* cap : {"SYS_PTRACE", "IPC_LOCK", "CHOWN", "SYS_ADMIN"}) {
    EXPECT_FALSE(capabilityAllowed(Level::Restricted, cap)) << cap;
  }
}

TEST(PodSecurity, SilentTemplateGetsRestrictedDefaults) {
  for (Level l : kLevels) {
    SCOPED_TRACE(toString(l));
    PodSecurityInput in;
    in.level = l;
    const PodSecurityResult r = podSecurity(in);
    const YAML::Node pod = YAML::Load(r.podSecurityContext);
    EXPECT_TRUE(pod["runAsNonRoot"].as<bool>());
    EXPECT_EQ(pod["runAsUser"].as<int>(), kWorkerUserId);
    EXPECT_EQ(pod["runAsGroup"].as<int>(), kWorkerUserId);
    EXPECT_EQ(pod["fsGroup"].as<int>(), kWorkerUserId);
    EXPECT_EQ(pod["seccompProfile"]["type"].as<std::string>(), "RuntimeDefault");
    const YAML::Node c = YAML::Load(r.containerSecurityContext);
    EXPECT_FALSE(c["allowPrivilegeEscalation"].as<bool>());
    EXPECT_EQ(seq(c["capabilities"]["drop"]), std::vector<std::string>{"ALL"});
    EXPECT_FALSE(c["capabilities"]["add"]);
    EXPECT_TRUE(r.omitted.empty());
    EXPECT_TRUE(testing::restrictedViolations(asPod(r)).empty());
  }
}

TEST(PodSecurity, PlanCapabilitiesAreAddedOnlyWhereTheLevelAllowsThem) {
  const std::vector<std::vector<std::string>> caps = {
      {}, {"SYS_PTRACE"}, {"IPC_LOCK"}, {"SYS_PTRACE", "IPC_LOCK"}, {"IPC_LOCK", "IPC_LOCK"}};
  for (Level l : kLevels) {
    for (const auto& want : caps) {
      SCOPED_TRACE(std::string(toString(l)) + " " + std::to_string(want.size()));
      PodSecurityInput in;
      in.level = l;
      in.capabilities = want;
      const PodSecurityResult r = podSecurity(in);
      const YAML::Node c = YAML::Load(r.containerSecurityContext);
      std::vector<std::string> unique;
      for (const auto& w : want) {
        if (std::find(unique.begin(), unique.end(), w) == unique.end()) unique.push_back(w);
      }
      if (l == Level::Privileged) {
        EXPECT_EQ(seq(c["capabilities"]["add"]), unique);
        EXPECT_TRUE(r.omitted.empty());
        EXPECT_EQ(testing::restrictedViolations(asPod(r)).size(), unique.size())
            << "restricted but for the added capabilities";
      } else {
        EXPECT_FALSE(c["capabilities"]["add"]);
        EXPECT_EQ(r.omitted, unique);
        EXPECT_TRUE(testing::restrictedViolations(asPod(r)).empty());
      }
      EXPECT_EQ(seq(c["capabilities"]["drop"]), std::vector<std::string>{"ALL"});
    }
  }
}

TEST(PodSecurity, TemplateFieldsWinOneByOne) {
  PodSecurityInput in;
  in.podSecurityContext =
      R"({"runAsUser": 1000, "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
          "supplementalGroups": [5]})";
  in.containerSecurityContext =
      R"({"allowPrivilegeEscalation": true, "readOnlyRootFilesystem": true})";
  const PodSecurityResult r = podSecurity(in);
  const YAML::Node pod = YAML::Load(r.podSecurityContext);
  EXPECT_EQ(pod["runAsUser"].as<int>(), 1000);
  EXPECT_EQ(pod["runAsGroup"].as<int>(), kWorkerUserId);
  EXPECT_EQ(pod["fsGroup"].as<int>(), kWorkerUserId);
  EXPECT_TRUE(pod["runAsNonRoot"].as<bool>());
  EXPECT_EQ(pod["seccompProfile"]["type"].as<std::string>(), "Localhost");
  EXPECT_EQ(pod["seccompProfile"]["localhostProfile"].as<std::string>(), "p.json");
  EXPECT_EQ(pod["supplementalGroups"][0].as<int>(), 5);
  const YAML::Node c = YAML::Load(r.containerSecurityContext);
  EXPECT_TRUE(c["allowPrivilegeEscalation"].as<bool>()) << "the template's word, even unrestricted";
  EXPECT_TRUE(c["readOnlyRootFilesystem"].as<bool>());
  EXPECT_EQ(seq(c["capabilities"]["drop"]), std::vector<std::string>{"ALL"});
  EXPECT_EQ(testing::restrictedViolations(asPod(r)),
            std::vector<std::string>{"container worker allowPrivilegeEscalation not false"});
}

TEST(PodSecurity, TemplateCapabilitiesReplaceTheDropAllAndKeepThePlans) {
  PodSecurityInput in;
  in.containerSecurityContext = R"({"capabilities": {"add": ["NET_ADMIN", "SYS_PTRACE"]}})";
  in.capabilities = {"SYS_PTRACE", "IPC_LOCK"};
  in.level = Level::Privileged;
  YAML::Node c = YAML::Load(podSecurity(in).containerSecurityContext);
  EXPECT_FALSE(c["capabilities"]["drop"]);
  EXPECT_EQ(seq(c["capabilities"]["add"]),
            (std::vector<std::string>{"NET_ADMIN", "SYS_PTRACE", "IPC_LOCK"}));

  in.containerSecurityContext = R"({"capabilities": {"drop": ["NET_RAW"]}})";
  in.level = Level::Restricted;
  const PodSecurityResult r = podSecurity(in);
  c = YAML::Load(r.containerSecurityContext);
  EXPECT_EQ(seq(c["capabilities"]["drop"]), std::vector<std::string>{"NET_RAW"});
  EXPECT_FALSE(c["capabilities"]["add"]);
  EXPECT_EQ(r.omitted, (std::vector<std::string>{"SYS_PTRACE", "IPC_LOCK"}));
}

TEST(PodSecurity, DefaultsTheApiOrKubeletWouldRefuseAreLeftOut) {
  for (const char* pod : {R"({"runAsUser": 0})", ""}) {
    PodSecurityInput in;
    in.podSecurityContext = pod;
    if (std::string(pod).empty()) in.containerSecurityContext = R"({"runAsUser": 0})";
    const YAML::Node p = YAML::Load(podSecurity(in).podSecurityContext);
    EXPECT_FALSE(p["runAsNonRoot"]) << "uid 0 with runAsNonRoot would never start";
  }
  for (const char* c : {R"({"privileged": true})", R"({"capabilities": {"add": ["SYS_ADMIN"]}})",
                        R"({"capabilities": {"add": ["CAP_SYS_ADMIN"]}})"}) {
    PodSecurityInput in;
    in.containerSecurityContext = c;
    const YAML::Node out = YAML::Load(podSecurity(in).containerSecurityContext);
    EXPECT_FALSE(out["allowPrivilegeEscalation"]) << c << ": the API rejects it beside false";
  }
  PodSecurityInput in;
  in.containerSecurityContext = R"({"privileged": false})";
  EXPECT_FALSE(
      YAML::Load(podSecurity(in).containerSecurityContext)["allowPrivilegeEscalation"].as<bool>());
}

TEST(PodSecurity, MalformedTemplateContextsAreTreatedAsSilent) {
  for (const char* bad : {"not json", "[1,2]", "42", "{\"capabilities\": 3}"}) {
    SCOPED_TRACE(bad);
    PodSecurityInput in;
    in.podSecurityContext = bad;
    in.containerSecurityContext = bad;
    in.level = Level::Restricted;
    EXPECT_TRUE(testing::restrictedViolations(asPod(podSecurity(in))).empty());
  }
}

TEST(PodSecurityLeftOut, BaselineAndRestrictedLeaveOutWhatNeedsIpcLock) {
  EXPECT_TRUE(leftOutBy(Level::Privileged).empty());
  for (Level l : {Level::Baseline, Level::Restricted}) {
    const auto out = leftOutBy(l);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].name, "ibv");
    EXPECT_EQ(out[1].name, "cuda_gdr");
    for (const auto& o : out) EXPECT_EQ(o.capability, "IPC_LOCK");
  }
}

TEST(PodSecurityLeftOut, FiltersAJobsListsKeepingTheirOrder) {
  const auto out = leftOutBy(Level::Restricted);
  const auto& transports = api::knownTransports();
  const auto& channels = api::knownChannels();
  EXPECT_EQ(withoutLeftOut({}, transports, out), (std::vector<std::string>{"shm", "uv"}));
  std::vector<std::string> noGdr;
  for (const auto& c : channels) {
    if (c != "cuda_gdr") noGdr.push_back(c);
  }
  EXPECT_EQ(withoutLeftOut({}, channels, out), noGdr);
  EXPECT_EQ(withoutLeftOut({"uv", "ibv"}, transports, out), std::vector<std::string>{"uv"});
  EXPECT_EQ(withoutLeftOut({"uv", "shm"}, transports, out),
            (std::vector<std::string>{"uv", "shm"}));
  EXPECT_EQ(withoutLeftOut({"ibv"}, transports, out), std::vector<std::string>{})
      << "nothing left: the operator does not plan the job (desired_state_test)";
  EXPECT_EQ(withoutLeftOut({}, transports, {}), std::vector<std::string>{}) << "all viable";
}

// The checker the other tests rely on catches each rule it claims.
TEST(RestrictedCheck, CatchesEachRule) {
  const std::string good =
      R"({"spec":{"securityContext":{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}},
          "volumes":[{"name":"v","emptyDir":{}}],
          "containers":[{"name":"c","securityContext":{"allowPrivilegeEscalation":false,
                         "capabilities":{"drop":["ALL"],"add":["NET_BIND_SERVICE"]}}}]}})";
  EXPECT_EQ(testing::restrictedViolations(YAML::Load(good)), std::vector<std::string>{});
  const std::vector<std::pair<std::string, std::string>> breaks = {
      {R"("volumes":[{"name":"v","emptyDir":{}}])",
       R"("volumes":[{"name":"v","hostPath":{"path":"/"}}])"},
      {R"("volumes":)", R"("hostNetwork":true,"volumes":)"},
      {R"("volumes":)", R"("hostPID":true,"volumes":)"},
      {R"("allowPrivilegeEscalation":false)", R"("allowPrivilegeEscalation":true)"},
      {R"("allowPrivilegeEscalation":false,)",
       R"("privileged":true,"allowPrivilegeEscalation":false,)"},
      {R"("allowPrivilegeEscalation":false,)", ""},
      {R"("drop":["ALL"])", R"("drop":["NET_RAW"])"},
      {R"("add":["NET_BIND_SERVICE"])", R"("add":["SYS_PTRACE"])"},
      {R"("runAsNonRoot":true)", R"("runAsNonRoot":false)"},
      {R"("runAsNonRoot":true,)", R"("runAsUser":0,"runAsNonRoot":true,)"},
      {R"("type":"RuntimeDefault")", R"("type":"Unconfined")"},
      {R"("capabilities":)", R"("seccompProfile":{"type":"Unconfined"},"capabilities":)"},
  };
  for (const auto& [from, to] : breaks) {
    std::string bad = good;
    bad.replace(bad.find(from), from.size(), to);
    EXPECT_FALSE(testing::restrictedViolations(YAML::Load(bad)).empty()) << bad;
  }
}

}  // namespace
}  // namespace rpcjob::op
