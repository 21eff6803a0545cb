// crds/rpcjob.yaml and the C++ model (api/) describe the same resource twice: the
// API server validates with the first, the operator and `rpcjob run` with the
// second. This test keeps them the same: fields, enums and defaults.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>

#include "rpcjob/api/defaults.h"
#include "rpcjob/api/names.h"
#include "rpcjob/api/schema.h"
#include "rpcjob/api/types.h"

namespace rpcjob::api {
namespace {

struct CrdShape {
  std::map<std::string, std::set<std::string>> objects;  // path -> property names
  std::map<std::string, std::set<std::string>> enums;    // path -> values as text
  std::map<std::string, std::string> defaults;           // path -> scalar default
};

// Walks a structural schema the way schema.h names paths.
void walk(const YAML::Node& schema, const std::string& path, CrdShape& shape) {
  if (schema["enum"]) {
    for (const auto& v : schema["enum"]) shape.enums[path].insert(v.Scalar());
  }
  if (schema["default"] && schema["default"].IsScalar()) {
    shape.defaults[path] = schema["default"].Scalar();
  }
  if (schema["x-kubernetes-preserve-unknown-fields"]) return;  // opaque (the pod template)
  if (const auto props = schema["properties"]) {
    for (const auto& kv : props) {
      const std::string name = kv.first.Scalar();
      shape.objects[path].insert(name);
      walk(kv.second, path.empty() ? name : path + "." + name, shape);
    }
  }
  if (const auto items = schema["items"]) walk(items, path + "[]", shape);
}

class CrdAgreement : public ::testing::Test {
 protected:
  void SetUp() override {
    crd_ = YAML::LoadFile(std::string(RPCJOB_SOURCE_DIR) + "/crds/rpcjob.yaml");
    const YAML::Node version = crd_["spec"]["versions"][0];
    walk(version["schema"]["openAPIV3Schema"], "", shape_);
  }

  YAML::Node crd_;
  CrdShape shape_;
};

TEST_F(CrdAgreement, Identity) {
  EXPECT_EQ(crd_["apiVersion"].Scalar(), "apiextensions.k8s.io/v1");
  EXPECT_EQ(crd_["spec"]["group"].Scalar(), kGroup);
  EXPECT_EQ(crd_["spec"]["names"]["kind"].Scalar(), kKind);
  EXPECT_EQ(crd_["spec"]["names"]["plural"].Scalar(), kPlural);
  EXPECT_EQ(crd_["metadata"]["name"].Scalar(), std::string(kPlural) + "." + kGroup);
  EXPECT_EQ(crd_["spec"]["names"]["shortNames"][0].Scalar(), "rj");
  const YAML::Node version = crd_["spec"]["versions"][0];
  EXPECT_EQ(version["name"].Scalar(), kVersion);
  EXPECT_TRUE(version["subresources"]["status"].IsMap());
  std::set<std::string> columns;
  for (const auto& c : version["additionalPrinterColumns"]) columns.insert(c["name"].Scalar());
  EXPECT_EQ(columns, (std::set<std::string>{"Workers", "Ready", "State", "Age"}));
}

TEST_F(CrdAgreement, SameFieldsBothWays) {
  // Every object the parser reads strictly exists in the CRD with the same fields...
  for (const auto& [path, fields] : objectFields()) {
    const auto it = shape_.objects.find(path);
    ASSERT_NE(it, shape_.objects.end()) << "the CRD has no object at '" << path << "'";
    EXPECT_EQ(it->second, fields) << "fields of '" << path << "' differ";
  }
  // ... and every object the CRD spells out is one the parser knows (metadata is the
  // API server's own; map-valued leaves have no properties).
  for (const auto& [path, fields] : shape_.objects) {
    EXPECT_TRUE(objectFields().count(path))
        << "the parser does not know the CRD object '" << path << "'";
  }
}

TEST_F(CrdAgreement, SameEnums) {
  for (const auto& [path, values] : enumFields()) {
    const std::set<std::string> want(values.begin(), values.end());
    EXPECT_EQ(shape_.enums[path], want) << "enum of '" << path << "' differs";
  }
  for (const auto& [path, values] : shape_.enums) {
    EXPECT_TRUE(enumFields().count(path)) << "the parser has no enum for '" << path << "'";
  }
}

TEST_F(CrdAgreement, SameDefaults) {
  const std::map<std::string, std::string> want = {
      {"spec.workers[].replicas", std::to_string(kDefaultReplicas)},
      {"spec.workers[].gpusPerWorker", std::to_string(kDefaultGpusPerWorker)},
      {"spec.placement.policy", kDefaultPlacementPolicy},
      {"spec.placement.workersPerPod", kDefaultWorkersPerPod},
      {"spec.placement.workersPerGpu", std::to_string(kDefaultWorkersPerGpu)},
      {"spec.deviceMaps.mode", kDefaultDeviceMapMode},
      {"spec.runPolicy.backoffLimit", std::to_string(kDefaultBackoffLimit)},
      {"spec.runPolicy.suspend", kDefaultSuspend ? "true" : "false"},
      {"spec.runPolicy.cleanPodPolicy", kDefaultCleanPodPolicy},
      {"spec.metrics.port", std::to_string(kDefaultMetricsPort)},
      {"spec.metrics.perPeerLabels", kDefaultPerPeerLabels ? "true" : "false"},
  };
  EXPECT_EQ(shape_.defaults, want);
}

TEST_F(CrdAgreement, BoundsMatchTheValidator) {
  const YAML::Node spec =
      crd_["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
  const YAML::Node group = spec["properties"]["workers"]["items"]["properties"];
  EXPECT_EQ(group["replicas"]["minimum"].as<int>(), 1);
  EXPECT_EQ(group["replicas"]["maximum"].as<int>(), kMaxWorkers);
  EXPECT_EQ(group["gpusPerWorker"]["minimum"].as<int>(), 0);
  EXPECT_EQ(group["name"]["maxLength"].as<std::size_t>(), kMaxDnsLabel);
  bool boundRule = false;
  for (const auto& rule : spec["properties"]["workers"]["x-kubernetes-validations"]) {
    if (rule["rule"].Scalar().find("<= " + std::to_string(kMaxWorkers)) != std::string::npos) {
      boundRule = true;
    }
  }
  EXPECT_TRUE(boundRule) << "no CEL rule bounds the total workers by kMaxWorkers";
}

}  // namespace
}  // namespace rpcjob::api
