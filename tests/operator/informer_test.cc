// The informer's list/watch/relist logic against a scripted HttpClient: 410
// relists and diffs, bad events, failures with backoff. No server needed.
#include "rpcjob/operator/informer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "fake_http.h"

namespace rpcjob::kube {
namespace {

using namespace std::chrono_literals;
using rpcjob::testing::FakeHttp;

std::string cm(const std::string& name, const std::string& rv) {
  return R"({"metadata":{"name":")" + name + R"(","namespace":"ns","resourceVersion":")" + rv +
         "\"}}";
}
std::string list(const std::string& rv, const std::vector<std::string>& items) {
  std::string s =
      R"({"kind":"ConfigMapList","metadata":{"resourceVersion":")" + rv + R"("},"items":[)";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? "," : "") + items[i];
  return s + "]}";
}
std::string event(const char* type, const std::string& obj) {
  return std::string(R"({"type":")") + type + R"(","object":)" + obj + "}";
}

struct Recorder {
  std::mutex mu;
  std::vector<std::string> events;
  EventHandler handler() {
    return {[this](const ObjectPtr& o) { add("add " + o->metadata.name); },
            [this](const ObjectPtr&, const ObjectPtr& n) { add("update " + n->metadata.name); },
            [this](const ObjectPtr& o) { add("delete " + o->metadata.name); }};
  }
  void add(std::string e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mu);
    return events;
  }
};

bool eventually(const std::function<bool()>& pred) {
  for (int i = 0; i < 200 && !pred(); ++i) std::this_thread::sleep_for(10ms);
  return pred();
}

InformerOptions fastOptions() {
  InformerOptions o;
  o.ns = "ns";
  o.backoff = Backoff::Options().setInitial(1ms).setMax(5ms).setSeed(1);
  return o;
}

TEST(Informer, GoneRelistsAndReportsTheDifference) {
  auto http = std::make_shared<FakeHttp>();
  std::atomic<int> lists{0}, watches{0};
  http->onSend = [&](const HttpRequest&) {
    return ++lists == 1 ? FakeHttp::json(200, list("10", {cm("a", "1"), cm("b", "2")}))
                        : FakeHttp::json(200, list("20", {cm("a", "11"), cm("c", "12")}));
  };
  http->onStream = [&](const HttpRequest& r, const LineHandler& onLine, Cancellation& cancel) {
    if (++watches == 1) {
      EXPECT_NE(r.target.find("resourceVersion=10"), std::string::npos) << r.target;
      EXPECT_NE(r.target.find("allowWatchBookmarks=true"), std::string::npos) << r.target;
      return FakeHttp::deliver(
          {event("MODIFIED", cm("a", "11")),
           R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}})"},
          onLine);
    }
    EXPECT_NE(r.target.find("resourceVersion=20"), std::string::npos) << r.target;
    return FakeHttp::blockUntilCancelled(cancel);
  };
  auto client = std::make_shared<Client>(http, nullptr);
  Informer informer(client, resources::kConfigMaps, fastOptions());
  Recorder rec;
  informer.addHandler(rec.handler());
  informer.start();
  ASSERT_TRUE(eventually([&] { return watches >= 2; }));
  informer.stop();
  EXPECT_EQ(rec.get(),
            (std::vector<std::string>{"add a", "add b", "update a", "add c", "delete b"}));
  EXPECT_EQ(informer.cache().keys(), (std::vector<std::string>{"ns/a", "ns/c"}));
  EXPECT_EQ(informer.stats().lists, 2);
  EXPECT_EQ(informer.stats().errors, 0) << "410 is routine, not an error";
}

TEST(Informer, BadEventIsAnErrorThenARelist) {
  auto http = std::make_shared<FakeHttp>();
  std::atomic<int> lists{0}, watches{0};
  http->onSend = [&](const HttpRequest&) {
    ++lists;
    return FakeHttp::json(200, list("5", {cm("a", "1")}));
  };
  http->onStream = [&](const HttpRequest&, const LineHandler& onLine, Cancellation& cancel) {
    if (++watches == 1) return FakeHttp::deliver({"{this is not json"}, onLine);
    return FakeHttp::blockUntilCancelled(cancel);
  };
  Informer informer(std::make_shared<Client>(http, nullptr), resources::kConfigMaps, fastOptions());
  informer.start();
  ASSERT_TRUE(eventually([&] { return watches >= 2; }));
  informer.stop();
  EXPECT_EQ(lists.load(), 2);
  EXPECT_EQ(informer.stats().errors, 1);
  EXPECT_EQ(informer.cache().size(), 1u);
}

TEST(Informer, ListFailuresBackOffAndRetry) {
  auto http = std::make_shared<FakeHttp>();
  std::atomic<int> lists{0};
  http->onSend = [&](const HttpRequest&) {
    if (++lists <= 3) return FakeHttp::json(503, "unavailable");
    return FakeHttp::json(200, list("7", {cm("x", "7")}));
  };
  http->onStream = [&](const HttpRequest&, const LineHandler&, Cancellation& cancel) {
    return FakeHttp::blockUntilCancelled(cancel);
  };
  Informer informer(std::make_shared<Client>(http, nullptr), resources::kConfigMaps, fastOptions());
  informer.start();
  EXPECT_FALSE(informer.hasSynced());
  ASSERT_TRUE(informer.waitForSync(5s));
  informer.stop();
  EXPECT_EQ(lists.load(), 4);
  EXPECT_EQ(informer.stats().errors, 3);
  ASSERT_NE(informer.cache().get("ns/x"), nullptr);
}

// /healthz's signal: an informer that keeps failing is unhealthy once the
// failures outlast the tolerance, and healthy again after a success.
TEST(Informer, HealthFailsWhileListsKeepFailingAndRecovers) {
  auto http = std::make_shared<FakeHttp>();
  std::atomic<bool> up{false};
  http->onSend = [&](const HttpRequest&) {
    return up ? FakeHttp::json(200, list("7", {})) : FakeHttp::json(503, "unavailable");
  };
  http->onStream = [&](const HttpRequest&, const LineHandler&, Cancellation& cancel) {
    return FakeHttp::blockUntilCancelled(cancel);
  };
  Informer informer(std::make_shared<Client>(http, nullptr), resources::kConfigMaps, fastOptions());
  EXPECT_TRUE(informer.healthy(0s)) << "not failing yet";
  informer.start();
  ASSERT_TRUE(eventually([&] { return informer.stats().errors > 0; }));
  EXPECT_TRUE(informer.healthy(1h)) << "failing, within the tolerance";
  EXPECT_FALSE(informer.healthy(0s)) << "failing, past it";
  up = true;
  ASSERT_TRUE(informer.waitForSync(5s));
  EXPECT_TRUE(informer.healthy(0s)) << "a successful list heals it";
  informer.stop();
}

TEST(Informer, NormalWatchEndsRestartFromTheLastVersionWithoutRelisting) {
  auto http = std::make_shared<FakeHttp>();
  std::atomic<int> watches{0};
  std::mutex mu;
  std::vector<std::string> targets;
  http->onSend = [&](const HttpRequest&) { return FakeHttp::json(200, list("1", {})); };
  http->onStream = [&](const HttpRequest& r, const LineHandler& onLine, Cancellation& cancel) {
    {
      std::lock_guard<std::mutex> lock(mu);
      targets.push_back(r.target);
    }
    int n = ++watches;
    if (n == 1) return FakeHttp::deliver({event("ADDED", cm("a", "2"))}, onLine);
    if (n == 2) {
      return FakeHttp::deliver(
          {R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}})"}, onLine,
          StreamEnd::kIdle);
    }
    return FakeHttp::blockUntilCancelled(cancel);
  };
  Informer informer(std::make_shared<Client>(http, nullptr), resources::kConfigMaps, fastOptions());
  informer.start();
  ASSERT_TRUE(eventually([&] { return watches >= 3; }));
  informer.stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(targets[1].find("resourceVersion=2&"), std::string::npos) << targets[1];
  EXPECT_NE(targets[2].find("resourceVersion=9&"), std::string::npos) << "bookmark not followed";
  EXPECT_EQ(informer.stats().lists, 1);
}

}  // namespace
}  // namespace rpcjob::kube
