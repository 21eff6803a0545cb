#include "rpcjob/runner/launch.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/intra_op_threads.h"

namespace rpcjob::runner {
namespace {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The first container's literal env entries from the template's JSON.
EnvList templateEnv(const api::PodTemplate& podTemplate, const std::string& group,
                    std::vector<std::string>& notes) {
  EnvList env;
  YAML::Node root;
  try {
    root = YAML::Load(podTemplate.json);
  } catch (const YAML::Exception& e) {
    notes.push_back("group " + group + ": template not readable for env: " + e.what());
    return env;
  }
  const YAML::Node containers = root["spec"]["containers"];
  if (!containers || !containers.IsSequence() || containers.size() == 0) return env;
  const YAML::Node entries = containers[0]["env"];
  if (!entries || !entries.IsSequence()) return env;
  for (const auto& entry : entries) {
    if (!entry.IsMap() || !entry["name"] || !entry["name"].IsScalar()) continue;
    const std::string name = entry["name"].Scalar();
    if (entry["valueFrom"]) {
      notes.push_back("group " + group + ": env " + name +
                      " uses valueFrom, which needs an API server: not set locally");
      continue;
    }
    env.emplace_back(name, entry["value"] && entry["value"].IsScalar() ? entry["value"].Scalar()
                                                                       : std::string());
  }
  return env;
}

bool isWorkerProgram(const std::string& command) {
  const auto slash = command.rfind('/');
  return (slash == std::string::npos ? command : command.substr(slash + 1)) == kWorkerProgram;
}

}  // namespace

bool setsVariable(const std::vector<std::pair<std::string, std::string>>& env,
                  const std::string& name) {
  return std::any_of(env.begin(), env.end(),
                     [&](const auto& entry) { return entry.first == name; });
}

std::string resolveCommand(const std::string& command, const std::string& manifestDir) {
  if (manifestDir.empty() || command.empty() || command.front() == '/' ||
      command.find('/') == std::string::npos) {
    return command;
  }
  return manifestDir + "/" + command;
}

std::string expandReferences(const std::string& text, const EnvList& env) {
  std::map<std::string, std::string> values;
  for (const auto& [k, v] : env) values[k] = v;  // later entries win
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '$' && i + 1 < text.size() && text[i + 1] == '$') {
      out += '$';
      ++i;
    } else if (text[i] == '$' && i + 1 < text.size() && text[i + 1] == '(') {
      const auto close = text.find(')', i + 2);
      const auto it = close == std::string::npos ? values.end()
                                                 : values.find(text.substr(i + 2, close - i - 2));
      if (it == values.end()) {
        out += text[i];
        continue;
      }
      out += it->second;
      i = close;
    } else {
      out += text[i];
    }
  }
  return out;
}

Launches buildLaunches(const api::RpcJob& job, const planner::Plan& plan,
                       const LaunchContext& context) {
  Launches out;
  std::map<std::string, const api::WorkerGroup*> groups;
  for (const auto& g : job.spec.workers) groups[g.name] = &g;
  std::map<std::string, EnvList> envByGroup;
  for (const auto& g : job.spec.workers) {
    envByGroup[g.name] = templateEnv(g.podTemplate, g.name, out.notes);
  }
  const std::string ns =
      job.metadata.namespaceName.empty() ? "default" : job.metadata.namespaceName;
  const std::string program = context.workerBinary.empty() ? kWorkerProgram : context.workerBinary;

  for (const auto& placement : plan.workers) {
    const WorkerEntry* entry = plan.assignment.byName(placement.name);
    const api::WorkerGroup& group = *groups.at(placement.group);
    WorkerLaunch w;
    w.name = placement.name;
    w.rank = placement.rank;
    w.address = entry ? entry->address : "";
    w.metricsPort = entry ? entry->metricsPort : 0;
    w.metricsFile = context.runDir + "/" + w.name + ".metrics";
    w.logFile = context.runDir + "/" + w.name + ".log";

    w.env = envByGroup[group.name];
    const EnvList pod = {
        {kEnvWorkerName, w.name},
        {kEnvRank, std::to_string(w.rank)},
        {kEnvWorldSize, std::to_string(plan.assignment.worldSize())},
        {kEnvJobName, job.metadata.name},
        {kEnvNamespace, ns},
        {kEnvAssignmentPath, context.assignmentPath},
        {kEnvMetricsPort, std::to_string(w.metricsPort)},
        {kEnvMetricsFile, w.metricsFile},
    };
    w.env.insert(w.env.end(), pod.begin(), pod.end());
    if (!context.secretPath.empty()) w.env.push_back({kEnvSecretFile, context.secretPath});
    const auto isSet = [&](const std::string& name) {
      return setsVariable(w.env, name) ||
             std::find(context.inherited.begin(), context.inherited.end(), name) !=
                 context.inherited.end();
    };
    for (auto& entry : intraOpEnvironment(context.intraOpThreads, isSet)) {
      w.env.push_back(std::move(entry));
    }

    std::vector<std::string> command;
    std::vector<std::string> args;
    if (!group.podTemplate.containers.empty()) {
      command = group.podTemplate.containers[0].command;
      args = group.podTemplate.containers[0].args;
    }
    if (command.empty()) {
      command = {program};
      if (args.empty()) args = {"serve"};
    } else if (isWorkerProgram(command[0])) {
      command[0] = program;
    }
    for (const auto& part : command) w.argv.push_back(expandReferences(part, w.env));
    w.argv[0] = resolveCommand(w.argv[0], context.manifestDir);
    for (const auto& part : args) w.argv.push_back(expandReferences(part, w.env));
    out.workers.push_back(std::move(w));
  }
  return out;
}

}  // namespace rpcjob::runner
