// rpcjob::telemetry (worker/telemetry): the settings a program reads from the
// environment, what attach() puts into RuntimeOptions, the endpoint's readiness,
// and the metrics file written when the Exporter goes. A program's end to end
// (hello under `rpcjob run`, its summary) is tests/sdk/install_and_run_hello.sh.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/telemetry/exporter.h"

namespace rpcjob::telemetry {
namespace {

Assignment twoWorkers() {
  Assignment a;
  a.jobName = "tjob";
  WorkerEntry w0;
  w0.name = "w0";
  w0.rank = 0;
  w0.address = "127.0.0.1:1";
  w0.metricsPort = 9100;
  w0.node = "node-a";
  WorkerEntry w1 = w0;
  w1.name = "w1";
  w1.rank = 1;
  w1.metricsPort = 0;
  a.workers = {w0, w1};
  return a;
}

// Clears the metrics variables for a test and restores nothing: every test sets
// what it needs.
struct TelemetryTest : ::testing::Test {
  void SetUp() override {
    for (const char* name :
         {kEnvMetricsPort, kEnvMetricsFile, kEnvMetricsPeerLabels, kEnvJobName}) {
      unsetenv(name);
    }
  }
  void TearDown() override { SetUp(); }
};

TEST_F(TelemetryTest, PortComesFromTheOverrideThenTheEnvironmentThenTheAssignment) {
  const Assignment a = twoWorkers();
  EXPECT_EQ(settingsFromEnvironment(a, "w0").port, 9100);
  EXPECT_EQ(settingsFromEnvironment(a, "w1").port, 0);
  EXPECT_EQ(settingsFromEnvironment(a, "nobody").port, 0);
  setenv(kEnvMetricsPort, "9200", 1);
  EXPECT_EQ(settingsFromEnvironment(a, "w0").port, 9200);
  EXPECT_EQ(settingsFromEnvironment(a, "w1").port, 9200);
  EXPECT_EQ(settingsFromEnvironment(a, "w0", 9300).port, 9300);
  EXPECT_EQ(settingsFromEnvironment(a, "w0", 0).port, 0);  // explicitly off
  setenv(kEnvMetricsPort, "", 1);                          // empty: unset
  EXPECT_EQ(settingsFromEnvironment(a, "w0").port, 9100);
}

TEST_F(TelemetryTest, FileAndPeerLabelsComeFromTheEnvironment) {
  const Assignment a = twoWorkers();
  Settings s = settingsFromEnvironment(a, "w1");
  EXPECT_FALSE(s.enabled());
  EXPECT_TRUE(s.peerLabel);
  setenv(kEnvMetricsFile, "/tmp/x.metrics", 1);
  setenv(kEnvMetricsPeerLabels, "0", 1);
  s = settingsFromEnvironment(a, "w1");
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.file, "/tmp/x.metrics");
  EXPECT_FALSE(s.peerLabel);
}

TEST_F(TelemetryTest, MalformedSettingsAreClearErrors) {
  const Assignment a = twoWorkers();
  for (const char* bad : {"abc", "12x", "-1", "65536", "99999999999999999999"}) {
    setenv(kEnvMetricsPort, bad, 1);
    try {
      settingsFromEnvironment(a, "w0");
      ADD_FAILURE() << "accepted RPCJOB_METRICS_PORT=" << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(kEnvMetricsPort), std::string::npos) << e.what();
    }
  }
  unsetenv(kEnvMetricsPort);
  setenv(kEnvMetricsPeerLabels, "yes", 1);
  EXPECT_THROW(settingsFromEnvironment(a, "w0"), std::invalid_argument);
}

TEST_F(TelemetryTest, DisabledExporterLeavesTheOptionsAsTheyWere) {
  const Assignment a = twoWorkers();
  Exporter exporter(settingsFromEnvironment(a, "w1"), a, "w1");
  runtime::RuntimeOptions options;
  exporter.attach(options);
  exporter.serve();
  EXPECT_FALSE(exporter.enabled());
  EXPECT_EQ(options.observer, nullptr);
  EXPECT_FALSE(options.hooks.wrapChannel);
  EXPECT_FALSE(options.hooks.wrapTransport);
  EXPECT_EQ(exporter.port(), 0);
}

TEST_F(TelemetryTest, AttachInstallsTheObserverAndTheDecorators) {
  const Assignment a = twoWorkers();
  Settings s;
  s.file = ::testing::TempDir() + "telemetry_attach.metrics";
  Exporter exporter(s, a, "w0");
  runtime::RuntimeOptions options;
  exporter.attach(options);
  EXPECT_NE(options.observer, nullptr);
#if RPCJOB_HAS_INSTRUMENT
  EXPECT_TRUE(options.hooks.wrapChannel);
  EXPECT_TRUE(options.hooks.wrapTransport);
#endif
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(TelemetryTest, TheMetricsFileIsWrittenWhenTheExporterGoes) {
  const Assignment a = twoWorkers();
  const std::string file = ::testing::TempDir() + "telemetry_exit.metrics";
  std::remove(file.c_str());
  setenv(kEnvMetricsFile, file.c_str(), 1);
  setenv(kEnvJobName, "from-env", 1);
  Identity identity{a, "w0", 0};
  {
    auto exporter = fromEnvironment(identity, 0);  // no endpoint, a file
    ASSERT_TRUE(exporter->enabled());
    EXPECT_EQ(exporter->port(), 0);
    std::ifstream before(file);
    EXPECT_FALSE(before.good()) << "written before the exporter went";
  }
  const std::string text = readFile(file);
  EXPECT_NE(text.find("rpcjob_worker_info{"), std::string::npos) << text;
  EXPECT_NE(text.find("worker=\"w0\""), std::string::npos) << text;
  EXPECT_NE(text.find("rpcjob_job=\"from-env\""), std::string::npos) << text;
  EXPECT_NE(text.find("node=\"node-a\""), std::string::npos) << text;
  std::remove(file.c_str());
}

TEST_F(TelemetryTest, TheIdentityCanComeFromTheEnvironmentToo) {
  for (const char* name : {kEnvAssignmentPath, kEnvPeers, kEnvWorkerName, kEnvRank}) {
    unsetenv(name);
  }
  EXPECT_THROW(fromEnvironment(), AssignmentError);  // not started by rpcjob
  setenv(kEnvPeers, "p0@127.0.0.1:1,p1@127.0.0.1:2", 1);
  setenv(kEnvWorkerName, "p1", 1);
  const std::string file = ::testing::TempDir() + "telemetry_identity.metrics";
  std::remove(file.c_str());
  setenv(kEnvMetricsFile, file.c_str(), 1);
  fromEnvironment().reset();
  EXPECT_NE(readFile(file).find("worker=\"p1\""), std::string::npos) << readFile(file);
  std::remove(file.c_str());
  for (const char* name : {kEnvPeers, kEnvWorkerName}) unsetenv(name);
}

// The second of two Exporters in one process (a test, a program that makes its
// runtime again) still writes its file on SIGTERM and dies of it: the first one
// gave the signals back when it went.
TEST_F(TelemetryTest, ALaterExporterWritesItsFileOnSigterm) {
  const Assignment a = twoWorkers();
  const std::string first = ::testing::TempDir() + "telemetry_first.metrics";
  const std::string second = ::testing::TempDir() + "telemetry_second.metrics";
  std::remove(second.c_str());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Settings s;
        s.file = first;
        { Exporter one(s, a, "w0"); }
        s.file = second;
        Exporter two(s, a, "w1");
        raise(SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        std::exit(0);  // SIGTERM was swallowed
      },
      ::testing::KilledBySignal(SIGTERM), "");
  EXPECT_NE(readFile(second).find("worker=\"w1\""), std::string::npos)
      << "no metrics file from the second exporter";
  std::remove(first.c_str());
  std::remove(second.c_str());
}

std::string get(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  ::close(fd);
  return response;
}

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST_F(TelemetryTest, ServesMetricsAndIsReadyOnlyOnceTold) {
  const Assignment a = twoWorkers();
  const int port = freePort();
  ASSERT_GT(port, 0);
  Identity identity{a, "w0", 0};
  auto exporter = fromEnvironment(identity, port);
  exporter->serve();
  ASSERT_EQ(exporter->port(), port);
  EXPECT_EQ(get(port, "/healthz").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(get(port, "/readyz").rfind("HTTP/1.1 503", 0), 0u);
  exporter->setReady();
  EXPECT_EQ(get(port, "/readyz").rfind("HTTP/1.1 200", 0), 0u);
  const std::string metrics = get(port, "/metrics");
  EXPECT_NE(metrics.find("rpcjob_worker_info{"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace rpcjob::telemetry
