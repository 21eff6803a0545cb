#include "rpcjob/runner/pod_launcher.h"

#include <cstdlib>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/intra_op_threads.h"

namespace rpcjob::runner {
namespace {

int codeOf(const ExitStatus& status) {
  return status.kind == ExitStatus::Kind::Signaled ? 128 + status.signal : status.code;
}

}  // namespace

std::vector<WorkerLaunch> podWorkerLaunches(
    const PodLaunch& launch, const std::vector<std::pair<std::string, std::string>>& processEnv,
    int visibleCores) {
  std::vector<WorkerLaunch> out;
  const int share = intraOpThreads(visibleCores, static_cast<int>(launch.workers.size()));
  for (const auto& w : launch.workers) {
    WorkerLaunch l;
    l.name = w.name;
    l.env = w.env;
    const auto isSet = [&](const std::string& name) {
      return setsVariable(w.env, name) || setsVariable(processEnv, name);
    };
    for (auto& entry : intraOpEnvironment(share, isSet)) l.env.push_back(std::move(entry));
    auto all = processEnv;
    all.insert(all.end(), w.env.begin(), w.env.end());
    for (const auto& [name, value] : w.env) {
      if (name == kEnvRank) l.rank = std::atoi(value.c_str());
    }
    for (const auto& part : w.argv) l.argv.push_back(expandReferences(part, all));
    out.push_back(std::move(l));
  }
  return out;
}

PodReport podReportOf(const SupervisorResult& result) {
  PodReport report;
  for (const auto& w : result.workers) {
    report.workers.push_back({w.name, codeOf(w.status),
                              w.status.kind == ExitStatus::Kind::Signaled ? w.status.signal : 0,
                              w.restarts});
  }
  if (result.failedWorker >= 0 && result.failedWorker < static_cast<int>(result.workers.size())) {
    report.failed = result.workers[result.failedWorker].name;
  }
  return report;
}

int podExitCode(const SupervisorResult& result) {
  if (result.phase == JobPhase::Succeeded) return 0;
  if (result.failedWorker >= 0 && result.failedWorker < static_cast<int>(result.workers.size())) {
    const int code = codeOf(result.workers[result.failedWorker].status);
    return code == 0 ? 1 : code;
  }
  if (result.interruptSignal > 0) return 128 + result.interruptSignal;
  return 1;
}

}  // namespace rpcjob::runner
