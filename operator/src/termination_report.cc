#include "rpcjob/operator/termination_report.h"

#include "json_util.h"
#include "rpcjob/assignment/assignment.h"

namespace rpcjob::op {

std::optional<PodReport> podReportOf(const std::string& podJson) {
  auto pod = kube::detail::parseJson(podJson);
  if (!pod || !pod->has_object_field("status") ||
      !pod->at("status").has_array_field("containerStatuses")) {
    return std::nullopt;
  }
  for (const auto& cs : pod->at("status").at("containerStatuses").as_array()) {
    if (!cs.has_object_field("state") || !cs.at("state").has_object_field("terminated")) continue;
    const std::string message = kube::detail::getString(cs.at("state").at("terminated"), "message");
    if (message.find("\"workers\"") == std::string::npos) continue;
    try {
      return parsePodReport(message);
    } catch (const AssignmentError&) {
      continue;  // a user's own termination message
    }
  }
  return std::nullopt;
}

std::optional<std::string> workerFailureOf(const std::string& podJson) {
  const auto report = podReportOf(podJson);
  if (!report || report->failed.empty()) return std::nullopt;
  std::string failed;
  std::string all;
  for (const auto& w : report->workers) {
    const std::string code =
        w.signal > 0 ? "signal " + std::to_string(w.signal) : "code " + std::to_string(w.exitCode);
    if (w.name == report->failed) failed = "worker " + w.name + " exited with " + code;
    all += (all.empty() ? "" : ", ") + w.name + " " +
           (w.signal > 0 ? "signal " + std::to_string(w.signal) : std::to_string(w.exitCode));
  }
  if (failed.empty()) failed = "worker " + report->failed + " failed";
  return failed + " (pod workers: " + all + ")";
}

}  // namespace rpcjob::op
