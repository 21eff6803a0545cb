// rpcjob-plan-bench: what planning a large job costs, for 64, 256 and 1024
// single-GPU workers (8 per node: 1024 workers on 128 nodes), one pod per worker
// and one pod per node: the time to plan and write the worker table (what the
// operator does when it plans), the table's bytes (one ConfigMap holds 1 MiB),
// the peak RSS of a process that plans it, and what each worker then does with it
// (parse the table, derive its own row of device maps).
//
// The anchor is the per-pair worker table this replaced: this program built
// against commit dc4a9ad (the last per-pair planner) on the same 2-core machine,
// benchmarks/results/2026-11-24-plan-2core.md.
//
// Usage: rpcjob-plan-bench [--repeat N]   (default 5; the best time is printed)
// Each size is planned in a child process so that its peak RSS is its own.

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rpcjob/assignment/assignment.h"
#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/planner/plan.h"

namespace {

using namespace rpcjob;
using Clock = std::chrono::steady_clock;

api::RpcJob bigJob(int workers, api::WorkersPerPod perPod) {
  api::RpcJob job;
  job.metadata.name = "big-training-job";
  job.metadata.namespaceName = "research";
  api::WorkerGroup g;
  g.name = "trainer";
  g.replicas = workers;
  g.gpusPerWorker = 1;
  job.spec.workers.push_back(g);
  job.spec.placement.workersPerPod = perPod;
  return job;
}

planner::ClusterView nodesFor(int workers) {
  planner::ClusterView cluster;
  for (int i = 0; i < (workers + 7) / 8; ++i) {
    planner::Node n;
    n.name = "gpu-node-" + std::to_string(i);
    n.allocatable = {8, 64000, int64_t{512} << 30, 0};
    n.labels[planner::kRdmaLabel] = "true";
    n.labels[planner::kNvlinkLabel] = "true";
    cluster.nodes.push_back(n);
  }
  return cluster;
}

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Result {
  double planMs = 1e30;    // planJob + toYaml, best of the repeats
  double workerMs = 1e30;  // parseAssignment + deviceMapsOf(self), best of the repeats
  long bytes = 0;
  long mapsOfLast = 0;
  int ok = 0;
};

// In the child: plan `repeat` times, report through a pipe.
Result measure(int workers, api::WorkersPerPod perPod, int repeat) {
  Result r;
  const api::RpcJob job = bigJob(workers, perPod);
  const planner::ClusterView cluster = nodesFor(workers);
  for (int i = 0; i < repeat; ++i) {
    const auto start = Clock::now();
    const planner::Plan plan = planner::planJob(job, cluster);
    const std::string text = toYaml(plan.assignment);
    r.planMs = std::min(r.planMs, msSince(start));
    r.ok = plan.planned();
    r.bytes = static_cast<long>(text.size());
    const auto startWorker = Clock::now();
    const Assignment read = parseAssignment(text);
    const auto maps = deviceMapsOf(read, read.workers.back().name);
    r.workerMs = std::min(r.workerMs, msSince(startWorker));
    r.mapsOfLast = static_cast<long>(maps.size());
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--repeat N]\n", argv[0]);
      return 2;
    }
  }
  std::printf("rpcjob-plan-bench: single-GPU workers, 8 per node (RDMA, NVLink), best of %d\n",
              repeat);
  std::printf(
      "anchor, the per-pair table (dc4a9ad, one pod per worker, same 2-core machine):\n"
      "  64: 118 ms, 361782 B, 26 MiB; 256: 1581 ms, 5754206 B, 367 MiB;"
      " 1024: 22369 ms, 92272750 B, 5810 MiB\n\n");
  std::printf("%-8s %-10s %6s %12s %14s %10s %14s %16s\n", "workers", "pods", "nodes", "plan ms",
              "table bytes", "bytes/wkr", "plan peak RSS", "worker read ms");
  for (const auto perPod : {api::WorkersPerPod::One, api::WorkersPerPod::Auto}) {
    for (const int workers : {64, 256, 1024}) {
      int fds[2];
      if (pipe(fds) != 0) return 1;
      const pid_t pid = fork();
      if (pid == 0) {
        close(fds[0]);
        const Result r = measure(workers, perPod, repeat);
        const bool written = write(fds[1], &r, sizeof r) == static_cast<ssize_t>(sizeof r);
        _exit(written ? 0 : 1);
      }
      close(fds[1]);
      Result r;
      const bool got = read(fds[0], &r, sizeof r) == static_cast<ssize_t>(sizeof r);
      close(fds[0]);
      int status = 0;
      struct rusage usage {};
      wait4(pid, &status, 0, &usage);
      if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !r.ok) {
        std::printf("%-8d failed\n", workers);
        return 1;
      }
      std::printf("%-8d %-10s %6d %12.1f %14ld %10ld %11.1f MiB %16.1f\n", workers,
                  perPod == api::WorkersPerPod::One ? "per worker" : "per node", (workers + 7) / 8,
                  r.planMs, r.bytes, r.bytes / workers, usage.ru_maxrss / 1024.0, r.workerMs);
    }
  }
  std::printf(
      "\nplan ms: planJob + toYaml (the ConfigMap's text). worker read ms: one worker\n"
      "parsing that text and deriving its own device maps to every peer.\n");
  return 0;
}
