// RPCJOB_TRACE (worker/src/trace/): each thread's points in order, one file per
// process, a real driver and worker tracing the same training steps, and
// benchmarks/profile/trace_timeline.py cutting them into iterations.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "autograd_functions.h"
#include "cluster.h"
#include "rpcjob/runtime/dist_autograd.h"
#include "trace/trace.h"

namespace rpcjob::testing {
namespace {

namespace trace = runtime::trace;
namespace dist = runtime::dist_autograd;

struct Line {
  long long ns;
  long pid, tid;
  std::string what;
  unsigned long long id;
};

std::vector<Line> readTrace(const std::string& path) {
  std::vector<Line> out;
  std::ifstream in(path);
  Line l;
  while (in >> l.ns >> l.pid >> l.tid >> l.what >> l.id) out.push_back(l);
  return out;
}

std::string run(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

// First: nothing in this process has turned tracing on yet.
TEST(TraceTest, OffUnlessAskedFor) {
  if (std::getenv("RPCJOB_TRACE") != nullptr) GTEST_SKIP() << "RPCJOB_TRACE is set";
  trace::point("test.off");
  EXPECT_FALSE(trace::flush());
}

TEST(TraceTest, ThreadsAndProcessesOfOneTrainingRun) {
  char tmpl[] = "/tmp/rpcjob-trace-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  setenv("RPCJOB_TRACE", dir.c_str(), 1);  // the worker processes read it at start-up
  trace::enable(dir);

  // Two threads, each in order, kept after the threads end.
  auto count = [](int base) {
    for (int i = 0; i < 100; ++i) trace::point("test.count", base + i);
  };
  std::thread a(count, 0), b(count, 1000);
  a.join();
  b.join();

  constexpr int kIterations = 3;
  {
    Cluster cluster(1);
    auto& rt = cluster.driver();
    rt.rpcSync("w1", "ag.make_linear", {std::string("rm"), int64_t{8}, int64_t{8}, int64_t{2}});
    auto [lw, lb] = linearParams(8, 8, 1);
    for (int i = 0; i < kIterations; ++i) {
      dist::Context ctx(rt);
      at::Tensor y = rt.rpcSync("w1", "ag.linear",
                                {std::string("rm"), linearForward(lw, lb, at::randn({4, 8}))})
                         .toTensor();
      dist::backward(rt, ctx.id(), {y.sum()});
    }
    for (int code : cluster.shutdown()) EXPECT_EQ(code, 0);
  }
  // Written by the driver's shutdown already: a process that ends with _exit
  // (the GPU benchmark's forked worker) runs no exit handler.
  const std::string mineFile = dir + "/trace-" + std::to_string(getpid()) + ".txt";
  EXPECT_TRUE(std::filesystem::exists(mineFile)) << mineFile;
  ASSERT_TRUE(trace::flush());

  std::vector<std::vector<Line>> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(readTrace(entry.path().string()));
  }
  ASSERT_EQ(files.size(), 2u) << "one file per process";
  const long self = static_cast<long>(getpid());
  const auto& mine = files[0].front().pid == self ? files[0] : files[1];
  const auto& worker = files[0].front().pid == self ? files[1] : files[0];
  ASSERT_FALSE(mine.empty());
  ASSERT_FALSE(worker.empty());
  EXPECT_NE(worker.front().pid, self);

  std::map<long, std::vector<unsigned long long>> counted;
  std::set<unsigned long long> sent, answered, served;
  std::vector<std::string> steps;
  for (const auto& l : mine) {
    EXPECT_EQ(l.pid, self);
    if (l.what == "test.count") counted[l.tid].push_back(l.id);
    if (l.what == "call.send") sent.insert(l.id);
    if (l.what == "call.response") answered.insert(l.id);
    if (l.what.rfind("autograd.", 0) == 0 && l.what != "autograd.engine" &&
        l.what != "autograd.engine.done") {
      steps.push_back(l.what);
    }
  }
  ASSERT_EQ(counted.size(), 2u) << "two threads";
  for (const auto& [tid, ids] : counted) {
    ASSERT_EQ(ids.size(), 100u);
    for (size_t i = 1; i < ids.size(); ++i) EXPECT_EQ(ids[i], ids[i - 1] + 1) << "thread " << tid;
  }
  EXPECT_EQ(sent, answered) << "every call the driver sent was answered";
  std::vector<std::string> expected;
  for (int i = 0; i < kIterations; ++i) {
    expected.insert(expected.end(), {"autograd.backward", "autograd.backward.done",
                                     "autograd.release", "autograd.released"});
  }
  EXPECT_EQ(steps, expected);
  int engineRuns = 0;
  for (const auto& l : worker) {
    if (l.what == "serve.submit" || l.what == "serve.inline") served.insert(l.id);
    if (l.what == "autograd.engine") ++engineRuns;
  }
  EXPECT_EQ(engineRuns, kIterations) << "w1 ran its part of each backward";
  for (unsigned long long id : sent) EXPECT_TRUE(served.count(id)) << "call " << id;

  // The timeline: one window between consecutive context releases.
  const std::string out = run(std::string(RPCJOB_PYTHON) + " " RPCJOB_TRACE_TIMELINE " " + dir);
  EXPECT_NE(out.find("2 windows between 'autograd.released'"), std::string::npos) << out;
  EXPECT_NE(out.find("where the time goes"), std::string::npos) << out;
  EXPECT_NE(out.find("autograd.engine"), std::string::npos) << out;
  // The directory stays (/tmp): this process writes its file again at exit.
}

}  // namespace
}  // namespace rpcjob::testing
