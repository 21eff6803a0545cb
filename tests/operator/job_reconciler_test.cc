// The reconciler's acting order at its seam (a scripted API server): a restart
// is recorded before anything is deleted, so a 409 on the status write loses
// nothing; the restart happens on the retry.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>

#include "fake_http.h"
#include "rpcjob/operator/cache.h"
#include "rpcjob/operator/job_reconciler.h"

namespace rpcjob::op {
namespace {

using rpcjob::testing::FakeHttp;

kube::ObjectPtr obj(const std::string& json) {
  return std::make_shared<const kube::Object>(kube::parseObject(json));
}

// The server's echo of a write: the body with a uid and a resourceVersion.
std::string stored(std::string body, int n) {
  const std::string meta = "\"metadata\":{";
  auto at = body.find(meta);
  body.insert(at + meta.size(), "\"uid\":\"uid-" + std::to_string(n) + "\",\"resourceVersion\":\"" +
                                    std::to_string(100 + n) + "\",");
  return body;
}
// A pod as created, with a status (as the kubelet would write it).
std::string withStatus(const std::string& created, const std::string& status) {
  std::string json = created;
  json.pop_back();
  return json + ",\"status\":" + status + "}";
}

TEST(JobReconciler, RestartIsRecordedBeforeItActsAndA409LosesNothing) {
  const std::string job =
      R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":"j","namespace":"ns","uid":"JOB","generation":1,"resourceVersion":"1"},)"
      R"("spec":{"workers":[{"name":"w","replicas":2,"gpusPerWorker":1,"template":{"spec":{"containers":[{"name":"c","image":"i"}]}}}],"runPolicy":{"backoffLimit":2}}})";
  kube::Cache jobs, pods, services, configMaps, nodes, namespaces;
  jobs.upsert(obj(job));
  nodes.upsert(obj(
      R"({"metadata":{"name":"n","labels":{"kubernetes.io/hostname":"n"}},"status":{"allocatable":{"nvidia.com/gpu":"4","cpu":"8","memory":"8Gi"},"conditions":[{"type":"Ready","status":"True"}]}})"));
  Caches caches{jobs, pods, services, configMaps, nodes, namespaces};

  auto http = std::make_shared<FakeHttp>();
  int n = 0;
  bool conflict = false;
  std::string lastStatus;
  http->onSend = [&](const kube::HttpRequest& r) {
    if (r.method == "PUT" && r.target.find("/status") != std::string::npos) {
      if (conflict) {
        return FakeHttp::json(
            409, R"({"kind":"Status","status":"Failure","reason":"Conflict","code":409})");
      }
      lastStatus = std::regex_replace(r.body, std::regex(R"("resourceVersion":"[0-9]+")"),
                                      "\"resourceVersion\":\"" + std::to_string(100 + ++n) + "\"");
      return FakeHttp::json(200, lastStatus);
    }
    if (r.method == "POST") {
      std::string body = stored(r.body, ++n);
      if (r.target.find("/pods") != std::string::npos) pods.upsert(obj(body));
      if (r.target.find("/services") != std::string::npos) services.upsert(obj(body));
      if (r.target.find("/configmaps") != std::string::npos) configMaps.upsert(obj(body));
      return FakeHttp::json(201, body);
    }
    if (r.method == "DELETE") {
      return FakeHttp::json(200, R"({"kind":"Status","status":"Success"})");
    }
    return FakeHttp::json(404, R"({"kind":"Status","status":"Failure","code":404})");
  };
  auto client = std::make_shared<kube::Client>(http, nullptr);
  JobReconciler reconciler(client, nullptr);

  reconciler.reconcile("ns/j", caches);  // creates the children
  ASSERT_EQ(pods.list().size(), 2u);
  jobs.upsert(obj(lastStatus));
  // The pods run, then one fails.
  std::map<std::string, std::string> created;
  for (const auto& p : pods.list()) created[p->metadata.key()] = p->json;
  for (const auto& [key, json] : created) {
    pods.upsert(obj(withStatus(
        json, R"({"phase":"Running","conditions":[{"type":"Ready","status":"True"}]})")));
  }
  reconciler.reconcile("ns/j", caches);
  jobs.upsert(obj(lastStatus));
  ASSERT_EQ(kube::jsonString(lastStatus, "/status/phase"), "Running");
  ASSERT_TRUE(created.count("ns/j-w-0"));
  pods.upsert(obj(withStatus(
      created.at("ns/j-w-0"),
      R"({"phase":"Failed","containerStatuses":[{"name":"c","state":{"terminated":{"exitCode":1}}}]})")));

  // The status write meets a 409: nothing may be deleted.
  conflict = true;
  const size_t before = http->requests().size();
  EXPECT_THROW(reconciler.reconcile("ns/j", caches), kube::ApiError);
  std::vector<std::string> sent = http->requests();
  sent.erase(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(before));
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent.front().rfind("PUT ", 0), 0u) << sent.front();
  EXPECT_TRUE(std::none_of(sent.begin(), sent.end(), [](const std::string& s) {
    return s.rfind("DELETE", 0) == 0;
  })) << "a pod was deleted although the restart was not recorded";

  // The retry: status (restarts 1) first, then the deletes.
  conflict = false;
  const size_t retry = http->requests().size();
  reconciler.reconcile("ns/j", caches);
  sent = http->requests();
  sent.erase(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(retry));
  ASSERT_GE(sent.size(), 3u);
  EXPECT_EQ(sent[0].rfind("PUT ", 0), 0u) << sent[0];
  EXPECT_EQ(sent[1].rfind("DELETE ", 0), 0u) << sent[1];
  EXPECT_EQ(kube::jsonString(lastStatus, "/status/restarts"), "1");
}

}  // namespace
}  // namespace rpcjob::op
