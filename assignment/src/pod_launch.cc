#include "rpcjob/assignment/pod_launch.h"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <set>

#include "rpcjob/assignment/assignment.h"

namespace rpcjob {
namespace {

constexpr std::size_t kTerminationMessageLimit = 4096;

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string workerJson(const PodWorker& w) {
  std::string out = "{\"name\":" + quote(w.name) + ",\"argv\":[";
  for (std::size_t i = 0; i < w.argv.size(); ++i) out += (i ? "," : "") + quote(w.argv[i]);
  out += "],\"env\":[";
  for (std::size_t i = 0; i < w.env.size(); ++i) {
    out += std::string(i ? "," : "") + "{\"name\":" + quote(w.env[i].first) +
           ",\"value\":" + quote(w.env[i].second) + "}";
  }
  return out + "]}";
}

std::string exitJson(const WorkerExit& w) {
  return "{\"name\":" + quote(w.name) + ",\"exitCode\":" + std::to_string(w.exitCode) +
         ",\"signal\":" + std::to_string(w.signal) + ",\"restarts\":" + std::to_string(w.restarts) +
         "}";
}

YAML::Node load(const std::string& text, const char* what) {
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) throw AssignmentError(std::string(what) + ": not a JSON object");
    return root;
  } catch (const YAML::Exception& e) {
    throw AssignmentError(std::string(what) + ": not JSON: " + e.what());
  }
}

std::string scalar(const YAML::Node& node, const std::string& where) {
  if (!node || !node.IsScalar()) throw AssignmentError(where + ": expected a string");
  return node.Scalar();
}

int integer(const YAML::Node& node, const std::string& where) {
  if (!node) return 0;
  try {
    return node.as<int>();
  } catch (const YAML::Exception&) {
    throw AssignmentError(where + ": expected an integer");
  }
}

}  // namespace

bool operator==(const PodWorker& a, const PodWorker& b) {
  return a.name == b.name && a.argv == b.argv && a.env == b.env;
}
bool operator==(const PodLaunch& a, const PodLaunch& b) {
  return a.workers == b.workers;
}
bool operator==(const WorkerExit& a, const WorkerExit& b) {
  return a.name == b.name && a.exitCode == b.exitCode && a.signal == b.signal &&
         a.restarts == b.restarts;
}
bool operator==(const PodReport& a, const PodReport& b) {
  return a.workers == b.workers && a.failed == b.failed;
}

std::string toJson(const PodLaunch& launch) {
  std::string out = "{\"workers\":[";
  for (std::size_t i = 0; i < launch.workers.size(); ++i) {
    out += (i ? "," : "") + workerJson(launch.workers[i]);
  }
  return out + "]}";
}

PodLaunch parsePodLaunch(const std::string& text) {
  const YAML::Node root = load(text, kEnvPodWorkers);
  const YAML::Node workers = root["workers"];
  if (!workers || !workers.IsSequence() || workers.size() == 0) {
    throw AssignmentError(std::string(kEnvPodWorkers) + ": no workers");
  }
  PodLaunch out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const YAML::Node w = workers[i];
    const std::string where = std::string(kEnvPodWorkers) + ": workers[" + std::to_string(i) + "]";
    if (!w.IsMap()) throw AssignmentError(where + ": not an object");
    PodWorker worker;
    worker.name = scalar(w["name"], where + ".name");
    if (worker.name.empty()) throw AssignmentError(where + ".name: empty");
    if (!names.insert(worker.name).second) {
      throw AssignmentError(where + ": worker " + worker.name + " twice");
    }
    const YAML::Node argv = w["argv"];
    if (!argv || !argv.IsSequence() || argv.size() == 0) {
      throw AssignmentError(where + ".argv: no command");
    }
    for (std::size_t k = 0; k < argv.size(); ++k) {
      worker.argv.push_back(scalar(argv[k], where + ".argv[" + std::to_string(k) + "]"));
    }
    if (const YAML::Node env = w["env"]) {
      if (!env.IsSequence()) throw AssignmentError(where + ".env: not a list");
      for (std::size_t k = 0; k < env.size(); ++k) {
        const std::string at = where + ".env[" + std::to_string(k) + "]";
        if (!env[k].IsMap()) throw AssignmentError(at + ": not an object");
        worker.env.emplace_back(scalar(env[k]["name"], at + ".name"),
                                env[k]["value"] ? scalar(env[k]["value"], at + ".value") : "");
      }
    }
    out.workers.push_back(std::move(worker));
  }
  return out;
}

std::string toJson(const PodReport& report) {
  std::vector<const WorkerExit*> order;
  for (const auto& w : report.workers) {
    if (w.name == report.failed)
      order.insert(order.begin(), &w);
    else
      order.push_back(&w);
  }
  const std::string head = "{\"failed\":" + quote(report.failed) + ",\"workers\":[";
  std::string items;
  for (const WorkerExit* w : order) {
    const std::string item = (items.empty() ? "" : ",") + exitJson(*w);
    if (head.size() + items.size() + item.size() + 2 > kTerminationMessageLimit) break;
    items += item;
  }
  return head + items + "]}";
}

PodReport parsePodReport(const std::string& text) {
  const YAML::Node root = load(text, "termination report");
  PodReport out;
  if (root["failed"]) out.failed = scalar(root["failed"], "termination report: failed");
  const YAML::Node workers = root["workers"];
  if (!workers || !workers.IsSequence()) {
    throw AssignmentError("termination report: no workers");
  }
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const std::string where = "termination report: workers[" + std::to_string(i) + "]";
    const YAML::Node w = workers[i];
    if (!w.IsMap()) throw AssignmentError(where + ": not an object");
    out.workers.push_back(
        {scalar(w["name"], where + ".name"), integer(w["exitCode"], where + ".exitCode"),
         integer(w["signal"], where + ".signal"), integer(w["restarts"], where + ".restarts")});
  }
  return out;
}

}  // namespace rpcjob
