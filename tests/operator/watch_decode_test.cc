#include <gtest/gtest.h>

#include "rpcjob/operator/client.h"
#include "rpcjob/operator/controller.h"
#include "rpcjob/operator/errors.h"
#include "rpcjob/operator/object.h"

namespace rpcjob::kube {
namespace {

TEST(WatchDecode, AddedModifiedDeleted) {
  auto d = decodeWatchLine(
      R"({"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"12","generation":3,"labels":{"x":"y"},"ownerReferences":[{"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","name":"j","uid":"J","controller":true}]},"data":{"k":"v"}}})");
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_EQ(d.event.type, WatchEventType::kAdded);
  const Object& o = d.event.object;
  EXPECT_EQ(o.kind, "ConfigMap");
  EXPECT_EQ(o.metadata.key(), "ns/a");
  EXPECT_EQ(o.metadata.resourceVersion, "12");
  EXPECT_EQ(o.metadata.generation, 3);
  EXPECT_EQ(o.metadata.labels.at("x"), "y");
  ASSERT_NE(o.metadata.controllerRef(), nullptr);
  EXPECT_EQ(o.metadata.controllerRef()->name, "j");
  EXPECT_EQ(jsonString(o.json, "/data/k"), "v");

  EXPECT_EQ(decodeWatchLine(R"({"type":"MODIFIED","object":{"metadata":{"name":"a"}}})").event.type,
            WatchEventType::kModified);
  EXPECT_EQ(decodeWatchLine(R"({"type":"DELETED","object":{"metadata":{"name":"a"}}})").event.type,
            WatchEventType::kDeleted);
}

TEST(WatchDecode, BookmarkAndError) {
  auto b = decodeWatchLine(
      R"({"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"99"}}})");
  ASSERT_TRUE(b.ok) << b.error;
  EXPECT_EQ(b.event.type, WatchEventType::kBookmark);
  EXPECT_EQ(b.event.object.metadata.resourceVersion, "99");

  auto e = decodeWatchLine(
      R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (200)","reason":"Expired","code":410}})j");
  ASSERT_TRUE(e.ok) << e.error;
  EXPECT_EQ(e.event.type, WatchEventType::kError);
  EXPECT_EQ(e.event.errorCode, 410);
  EXPECT_EQ(e.event.errorReason, "Expired");
}

TEST(WatchDecode, BadInputIsAnErrorNotACrash) {
  const char* bad[] = {
      "",
      "{",
      "not json at all",
      "[1,2,3]",
      "null",
      R"({"type":"ADDED"})",
      R"({"object":{"metadata":{"name":"a"}}})",
      R"({"type":"EXPLODED","object":{"metadata":{"name":"a"}}})",
      R"({"type":"ADDED","object":"a string"})",
      R"({"type":42,"object":{}})",
      R"({"type":"ADDED","object":{"metadata":{}}})",
      R"({"type":"ADDED","object":{"metadata":"nope"}})",
      "\xff\xfe\x00garbage",
      R"({"type":"ADDED","object":{"metadata":{"name":"a"}}} trailing)",
  };
  for (const char* line : bad) {
    DecodedWatchLine d;
    EXPECT_NO_THROW(d = decodeWatchLine(line)) << line;
    EXPECT_FALSE(d.ok) << "accepted: " << line;
    EXPECT_FALSE(d.error.empty()) << line;
  }
}

TEST(Json, PointerLookups) {
  const char* doc = R"({"a":{"b/c":[10,{"d":"x"}],"t":true,"n":null}})";
  EXPECT_EQ(jsonString(doc, "/a/b~1c/0"), "10");
  EXPECT_EQ(jsonString(doc, "/a/b~1c/1/d"), "x");
  EXPECT_EQ(jsonString(doc, "/a/t"), "true");
  EXPECT_EQ(jsonString(doc, "/a/n"), std::nullopt);
  EXPECT_EQ(jsonString(doc, "/a/missing"), std::nullopt);
  EXPECT_EQ(jsonString(doc, "/a/b~1c/7"), std::nullopt);
  EXPECT_EQ(jsonString("{oops", "/a"), std::nullopt);
  EXPECT_EQ(jsonQuote("a\"b\n"), "\"a\\\"b\\n\"");
  EXPECT_THROW(parseObject("[]"), std::invalid_argument);
  EXPECT_THROW(parseObject("{"), std::invalid_argument);
}

TEST(Json, YamlToJson) {
  EXPECT_EQ(yamlToJson("a: 1\nb: [true, \"1\", x, null, 2.5, -3]\nc: {d: 'e'}\n"),
            R"({"a":1,"b":[true,"1","x",null,2.5,-3],"c":{"d":"e"}})");
  EXPECT_EQ(yamlToJson("s: \"quote\\\"d\"\n"), R"({"s":"quote\"d"})");
  EXPECT_THROW(yamlToJson("a: [1, 2"), std::invalid_argument);
}

TEST(Controller, NodeHeartbeatsDoNotChangeTheSchedulingFingerprint) {
  auto node = [](const char* heartbeat, const char* ready, const char* gpus) {
    return std::string(R"({"metadata":{"name":"n","resourceVersion":")") + heartbeat +
           R"(","labels":{"a":"b"}},"spec":{},"status":{"allocatable":{"nvidia.com/gpu":")" + gpus +
           R"("},"conditions":[{"type":"Ready","status":")" + ready + R"(","lastHeartbeatTime":")" +
           heartbeat + R"("}]}})";
  };
  EXPECT_EQ(op::nodeSchedulingFingerprint(node("1", "True", "8")),
            op::nodeSchedulingFingerprint(node("2", "True", "8")));
  EXPECT_NE(op::nodeSchedulingFingerprint(node("1", "True", "8")),
            op::nodeSchedulingFingerprint(node("1", "False", "8")));
  EXPECT_NE(op::nodeSchedulingFingerprint(node("1", "True", "8")),
            op::nodeSchedulingFingerprint(node("1", "True", "4")));
}

TEST(ApiError, FromStatusBodyOrPlainText) {
  auto e = ApiError::fromResponse(
      409,
      R"({"kind":"Status","status":"Failure","reason":"AlreadyExists","message":"exists","code":409})");
  EXPECT_TRUE(e.conflict());
  EXPECT_TRUE(e.alreadyExists());
  EXPECT_EQ(e.message(), "exists");
  auto p = ApiError::fromResponse(503, "<html>bad gateway</html>");
  EXPECT_EQ(p.code(), 503);
  EXPECT_TRUE(p.retryable());
  EXPECT_FALSE(ApiError::fromResponse(403, "{}").retryable());
  EXPECT_TRUE(ApiError::fromResponse(410, "{}").gone());
}

}  // namespace
}  // namespace rpcjob::kube
