// The job's Secret and NetworkPolicy as the operator creates them (pure JSON).
#include "rpcjob/operator/job_security.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "rpcjob/operator/object.h"

namespace rpcjob::op {
namespace {

using kube::jsonString;

const JobRef kJob{"train", "team", "uid-1"};

TEST(JobSecurity, SecretIsOwnedByTheJobAndHoldsTheKey) {
  const std::string s = secretJson(kJob, "abc123");
  EXPECT_EQ(jsonString(s, "/metadata/name"), "train-rpc-secret");
  EXPECT_EQ(jsonString(s, "/metadata/namespace"), "team");
  EXPECT_EQ(jsonString(s, "/metadata/ownerReferences/0/uid"), "uid-1");
  EXPECT_EQ(jsonString(s, "/metadata/ownerReferences/0/controller"), "true");
  EXPECT_EQ(jsonString(s, "/stringData/secret"), "abc123");
  EXPECT_EQ(jsonString(s, "/immutable"), "true");
}

TEST(JobSecurity, RandomSecretsAre256BitsOfHexAndDiffer) {
  const std::string a = randomHexSecret(), b = randomHexSecret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(JobSecurity, PolicyAdmitsTheJobsPodsAndTheScraperOnMetricsPortsOnly) {
  NetworkPolicyOptions options;
  const std::string p = networkPolicyJson(kJob, {9400, 9401}, options);
  EXPECT_EQ(jsonString(p, "/metadata/name"), "train-rpc");
  EXPECT_EQ(jsonString(p, "/metadata/ownerReferences/0/uid"), "uid-1");
  EXPECT_EQ(jsonString(p, "/spec/podSelector/matchLabels/rpcjob.dev~1job-name"), "train");
  EXPECT_EQ(jsonString(p, "/spec/policyTypes/0"), "Ingress");
  // Rule 0: the job's own pods, every port (transports and channel lanes).
  EXPECT_EQ(jsonString(p, "/spec/ingress/0/from/0/podSelector/matchLabels/rpcjob.dev~1job-name"),
            "train");
  EXPECT_FALSE(jsonString(p, "/spec/ingress/0/ports"));
  EXPECT_FALSE(jsonString(p, "/spec/ingress/0/from/1"));
  // Rule 1: the scraper, on the metrics ports alone.
  EXPECT_EQ(jsonString(p,
                       "/spec/ingress/1/from/0/namespaceSelector/matchLabels/"
                       "kubernetes.io~1metadata.name"),
            "monitoring");
  EXPECT_EQ(jsonString(p, "/spec/ingress/1/ports/0/port"), "9400");
  EXPECT_EQ(jsonString(p, "/spec/ingress/1/ports/1/port"), "9401");
  EXPECT_FALSE(jsonString(p, "/spec/ingress/2"));
  // No metrics endpoint: no scraper rule.
  EXPECT_FALSE(jsonString(networkPolicyJson(kJob, {}, options), "/spec/ingress/1"));
}

TEST(JobSecurity, ChartsScraperSelectorIsUsedAndABadOneRefused) {
  NetworkPolicyOptions options;
  options.metricsFrom = R"({"podSelector":{"matchLabels":{"app":"prometheus"}}})";
  EXPECT_EQ(jsonString(networkPolicyJson(kJob, {9400}, options),
                       "/spec/ingress/1/from/0/podSelector/matchLabels/app"),
            "prometheus");
  options.metricsFrom = "not json";
  EXPECT_THROW(networkPolicyJson(kJob, {9400}, options), std::invalid_argument);
  options.metricsFrom = "[1]";
  EXPECT_THROW(networkPolicyJson(kJob, {9400}, options), std::invalid_argument);
}

TEST(JobSecurity, MetricsPortsAreDistinctAndSorted) {
  Assignment a;
  for (int port : {9401, 0, 9400, 9401}) {
    WorkerEntry w;
    w.metricsPort = port;
    a.workers.push_back(w);
  }
  EXPECT_EQ(metricsPortsOf(a), (std::vector<int>{9400, 9401}));
}

}  // namespace
}  // namespace rpcjob::op
