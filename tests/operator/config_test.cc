#include "rpcjob/operator/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace rpcjob::kube {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "rpcjob-config-XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const char* kTwoContexts = R"(apiVersion: v1
kind: Config
clusters:
- name: a
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
- name: b
  cluster:
    server: https://b.example:443
    certificate-authority: ca.pem
users:
- name: tok
  user:
    token: abc123
- name: cert
  user:
    client-certificate: client.crt
    client-key-data: S0VZ
contexts:
- name: ctx-a
  context: {cluster: a, user: tok, namespace: team-a}
- name: ctx-b
  context: {cluster: b, user: cert}
current-context: ctx-a
)";

TEST(Kubeconfig, CurrentContextWithTokenAndInlineCa) {
  ClusterConfig c = parseKubeconfig(kTwoContexts, "/nowhere");
  EXPECT_EQ(c.server, "https://10.0.0.1:6443");  // trailing slash dropped
  EXPECT_EQ(c.tls.caPem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(c.token, "abc123");
  EXPECT_EQ(c.namespace_, "team-a");
  EXPECT_TRUE(c.tls.clientCertPem.empty());
}

TEST(Kubeconfig, NamedContextWithClientCertificateAndRelativeFiles) {
  TempDir dir;
  dir.write("ca.pem", "CA");
  dir.write("client.crt", "CERT");
  ClusterConfig c = parseKubeconfig(kTwoContexts, dir.path(), "ctx-b");
  EXPECT_EQ(c.server, "https://b.example:443");
  EXPECT_EQ(c.tls.caPem, "CA");
  EXPECT_EQ(c.tls.clientCertPem, "CERT");
  EXPECT_EQ(c.tls.clientKeyPem, "KEY");
  EXPECT_EQ(c.namespace_, "default");
  EXPECT_TRUE(c.token.empty());
}

TEST(Kubeconfig, Errors) {
  EXPECT_THROW(parseKubeconfig("[1, 2", "."), ConfigError);
  EXPECT_THROW(parseKubeconfig("just a string", "."), ConfigError);
  EXPECT_THROW(parseKubeconfig(kTwoContexts, ".", "nope"), ConfigError);
  EXPECT_THROW(parseKubeconfig(kTwoContexts, "/nonexistent-dir", "ctx-b"), ConfigError);  // ca.pem
  const char* exec = R"(clusters: [{name: c, cluster: {server: "https://x"}}]
users: [{name: u, user: {exec: {command: aws}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
)";
  try {
    parseKubeconfig(exec, ".");
    FAIL() << "exec plugin accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("exec"), std::string::npos);
  }
  const char* noServer = R"(clusters: [{name: c, cluster: {}}]
contexts: [{name: x, context: {cluster: c}}]
current-context: x
)";
  EXPECT_THROW(parseKubeconfig(noServer, "."), ConfigError);
}

TEST(Base64, DecodesStandardAndUrlAlphabets) {
  EXPECT_EQ(base64Decode("aGVsbG8gd29ybGQ="), "hello world");
  EXPECT_EQ(base64Decode("aGVs\nbG8="), "hello");
  EXPECT_EQ(base64Decode("_-8="), "\xff\xef");
  EXPECT_THROW(base64Decode("a$b"), ConfigError);
}

InClusterEnv fakeEnv(const std::string& dir, std::map<std::string, std::string> vars) {
  InClusterEnv env;
  env.serviceAccountDir = dir;
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  env.getenv = [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
  return env;
}

TEST(InCluster, ReadsServiceAccount) {
  TempDir dir;
  dir.write("token", "tok-1\n");
  dir.write("ca.crt", "CLUSTER-CA");
  dir.write("namespace", "ops\n");
  auto env = fakeEnv(
      dir.path(), {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}});
  ClusterConfig c = loadInCluster(env);
  EXPECT_EQ(c.server, "https://10.96.0.1:443");
  EXPECT_EQ(c.tls.caPem, "CLUSTER-CA");
  EXPECT_EQ(c.namespace_, "ops");
  EXPECT_EQ(c.tokenFile, dir.path() + "/token");
  EXPECT_EQ(TokenSource(c).token(), "tok-1");

  auto v6 = fakeEnv(dir.path(),
                    {{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "443"}});
  EXPECT_EQ(loadInCluster(v6).server, "https://[fd00::1]:443");
  EXPECT_THROW(loadInCluster(fakeEnv(dir.path(), {})), ConfigError);
}

TEST(InCluster, DefaultOrderFlagThenKubeconfigEnvThenInCluster) {
  TempDir dir;
  dir.write("token", "tok");
  dir.write("ca.crt", "CA");
  std::string kc = dir.write("kc", kTwoContexts);
  std::map<std::string, std::string> vars{{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                          {"KUBERNETES_SERVICE_PORT", "443"},
                                          {"HOME", "/nonexistent"}};
  EXPECT_EQ(loadDefaultConfig(kc, fakeEnv(dir.path(), vars)).server, "https://10.0.0.1:6443");
  vars["KUBECONFIG"] = "/nonexistent/a:" + kc;
  EXPECT_EQ(loadDefaultConfig("", fakeEnv(dir.path(), vars)).server, "https://10.0.0.1:6443");
  vars.erase("KUBECONFIG");
  EXPECT_EQ(loadDefaultConfig("", fakeEnv(dir.path(), vars)).source, "in-cluster");
  EXPECT_THROW(loadDefaultConfig("", fakeEnv(dir.path(), {{"HOME", "/nonexistent"}})), ConfigError);
}

TEST(TokenSource, RereadsTheFileAfterTheRefreshPeriod) {
  TempDir dir;
  std::string file = dir.write("token", "first");
  ClusterConfig c;
  c.tokenFile = file;
  auto now = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  TokenSource ts(c, std::chrono::seconds(60), [&] { return now; });
  EXPECT_EQ(ts.token(), "first");
  dir.write("token", "second");
  now += std::chrono::seconds(30);
  EXPECT_EQ(ts.token(), "first");  // cached
  now += std::chrono::seconds(31);
  EXPECT_EQ(ts.token(), "second");
  fs::remove(file);
  now += std::chrono::seconds(61);
  EXPECT_EQ(ts.token(), "second");  // a failed read keeps the last good token
}

TEST(TokenSource, StaticToken) {
  ClusterConfig c;
  c.token = "static";
  EXPECT_EQ(TokenSource(c).token(), "static");
}

}  // namespace
}  // namespace rpcjob::kube
