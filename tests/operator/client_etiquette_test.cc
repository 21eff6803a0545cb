// API etiquette of the client: the client-side rate limit and Retry-After on 429.
#include <gtest/gtest.h>

#include "fake_http.h"
#include "rpcjob/operator/client.h"
#include "rpcjob/operator/resource.h"
#include "rpcjob/operator/token_bucket.h"

namespace rpcjob::kube {
namespace {

using namespace std::chrono_literals;
using rpcjob::testing::FakeHttp;

TEST(TokenBucket, BurstPassesThenQpsPaces) {
  TokenBucket b(10, 3);
  const auto t0 = TokenBucket::Clock::time_point() + 100s;
  EXPECT_EQ(b.reserve(t0).count(), 0);
  EXPECT_EQ(b.reserve(t0).count(), 0);
  EXPECT_EQ(b.reserve(t0).count(), 0);
  EXPECT_EQ(b.reserve(t0), std::chrono::nanoseconds(100ms)) << "the 4th waits 1/qps";
  EXPECT_EQ(b.reserve(t0), std::chrono::nanoseconds(200ms)) << "and the 5th behind it";
  // After a quiet second the bucket is full again, never fuller than burst.
  const auto t1 = t0 + 10s;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.reserve(t1).count(), 0) << i;
  EXPECT_GT(b.reserve(t1).count(), 0);
  TokenBucket unlimited(0, 0);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(unlimited.reserve(t0).count(), 0);
}

TEST(ClientEtiquette, TooManyRequestsIsRetriedAfterRetryAfter) {
  auto http = std::make_shared<FakeHttp>();
  int calls = 0;
  http->onSend = [&](const HttpRequest&) {
    if (++calls == 1) {
      HttpResponse r = FakeHttp::json(
          429, R"({"kind":"Status","status":"Failure","reason":"TooManyRequests","code":429})");
      r.headers["retry-after"] = "1";
      return r;
    }
    return FakeHttp::json(200, R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}})");
  };
  Client client(http, nullptr);
  const auto started = std::chrono::steady_clock::now();
  Object o = client.get(resources::kConfigMaps, "ns", "a");
  EXPECT_EQ(o.metadata.name, "a");
  EXPECT_EQ(calls, 2);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1s) << "waited as the server asked";

  // A server that keeps refusing: the error surfaces (retryable) after the retries.
  ClientOptions o2;
  o2.maxRetriesOn429 = 0;
  calls = 0;
  http->onSend = [&](const HttpRequest&) {
    ++calls;
    return FakeHttp::json(
        429, R"({"kind":"Status","status":"Failure","reason":"TooManyRequests","code":429})");
  };
  Client impatient(http, nullptr, o2);
  try {
    impatient.get(resources::kConfigMaps, "ns", "a");
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), 429);
    EXPECT_TRUE(e.retryable());
  }
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace rpcjob::kube
