// rpcjob-launch: runs the workers of one pod as processes (runner/README.md,
// rpcjob/runner/pod_launcher.h). The I/O edge: the spec from the environment or a
// file, the supervisor, the termination report.
//
//   rpcjob-launch [--spec FILE] [--report FILE] [--grace-period S]
//   rpcjob-launch --version
//
// The spec: --spec FILE, else $RPCJOB_POD_WORKERS. The report: --report FILE,
// else $RPCJOB_TERMINATION_LOG, else /dev/termination-log (the kubelet's default
// terminationMessagePath); not written when the file cannot be opened.

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "rpcjob/assignment/assignment.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/pod_launch.h"
#include "rpcjob/runner/local_machine.h"
#include "rpcjob/runner/pod_launcher.h"
#include "rpcjob/version.h"

extern char** environ;

namespace {

using rpcjob::runner::SupervisorResult;

int usage(const std::string& problem) {
  std::cerr << "rpcjob-launch: " << problem
            << "\nusage: rpcjob-launch [--spec FILE] [--report FILE] [--grace-period S]\n";
  return 2;
}

bool readFile(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  out = text.str();
  return true;
}

std::vector<std::pair<std::string, std::string>> processEnvironment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env.emplace_back(std::string(*e, eq - *e), std::string(eq + 1));
  }
  return env;
}

}  // namespace

int main(int argc, char** argv) {
  std::string specFile;
  std::string reportFile;
  double grace = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--version") {
      std::cout << "rpcjob-launch " << RPCJOB_VERSION_STRING << "\n";
      return 0;
    }
    if ((arg == "--spec" || arg == "--report" || arg == "--grace-period") && i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--spec") specFile = value;
      if (arg == "--report") reportFile = value;
      if (arg == "--grace-period") {
        char* end = nullptr;
        grace = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0' || grace < 0) {
          return usage("--grace-period: not a number of seconds: " + value);
        }
      }
    } else {
      return usage("unknown argument: " + arg);
    }
  }

  std::string spec;
  if (!specFile.empty()) {
    if (!readFile(specFile, spec)) return usage("cannot read " + specFile);
  } else if (const char* env = std::getenv(rpcjob::kEnvPodWorkers)) {
    spec = env;
  } else {
    return usage(std::string("no spec: neither --spec nor $") + rpcjob::kEnvPodWorkers);
  }
  if (reportFile.empty()) {
    const char* env = std::getenv(rpcjob::kEnvTerminationLog);
    reportFile = env && *env ? env : rpcjob::kDefaultTerminationLog;
  }

  rpcjob::PodLaunch launch;
  try {
    launch = rpcjob::parsePodLaunch(spec);
  } catch (const rpcjob::AssignmentError& e) {
    std::cerr << "rpcjob-launch: " << e.what() << "\n";
    return 2;
  }
  // The workers get the container's environment without the launcher's own spec.
  unsetenv(rpcjob::kEnvPodWorkers);
  // Each worker's share of the pod's CPUs (its limit, where cpu.max has one).
  const auto workers = rpcjob::runner::podWorkerLaunches(
      launch, processEnvironment(), static_cast<int>(rpcjob::runner::detectCpuMilli() / 1000));

  rpcjob::runner::SupervisorOptions options;
  options.jobName = "pod";  // the status lines' name: the job's, from the spec
  for (const auto& [name, value] : launch.workers.front().env) {
    if (name == rpcjob::kEnvJobName) options.jobName = value;
  }
  options.backoffLimit = 0;  // the operator restarts the whole job, never one worker
  options.gracePeriod = std::chrono::milliseconds(static_cast<long long>(grace * 1000));
  options.statusInterval = std::chrono::minutes(1);
  SupervisorResult result;
  try {
    result = rpcjob::runner::supervise(workers, options);
  } catch (const std::exception& e) {
    std::cerr << "rpcjob-launch: " << e.what() << "\n";
    return 1;
  }

  const std::string report = rpcjob::toJson(rpcjob::runner::podReportOf(result));
  std::ofstream out(reportFile, std::ios::trunc);
  if (out) {
    out << report;
  } else {
    std::cerr << "rpcjob-launch: cannot write the report to " << reportFile << ": "
              << std::strerror(errno) << "\n";
  }
  std::cout << "rpcjob-launch: " << report << "\n";
  return rpcjob::runner::podExitCode(result);
}
