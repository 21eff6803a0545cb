#include "rpcjob/assignment/assignment.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace rpcjob {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw AssignmentError("assignment: " + where + ": " + what);
}

std::string lineOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.line < 0) return "";
  return " (line " + std::to_string(mark.line + 1) + ")";
}

template <typename T>
T scalar(const YAML::Node& node, const std::string& where, const char* type) {
  if (!node.IsScalar()) fail(where + lineOf(node), std::string("expected ") + type);
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    fail(where + lineOf(node), std::string("expected ") + type + ", got '" + node.Scalar() + "'");
  }
}

std::vector<std::string> stringList(const YAML::Node& node, const std::string& where) {
  std::vector<std::string> out;
  if (!node) return out;
  if (!node.IsSequence()) fail(where + lineOf(node), "expected a list");
  for (std::size_t i = 0; i < node.size(); ++i) {
    out.push_back(scalar<std::string>(node[i], where + "[" + std::to_string(i) + "]", "a string"));
  }
  return out;
}

void checkKeys(const YAML::Node& map, const std::set<std::string>& known,
               const std::string& where) {
  for (const auto& kv : map) {
    const auto key = kv.first.as<std::string>();
    if (!known.count(key)) fail(where + "." + key + lineOf(kv.first), "unknown field");
  }
}

std::map<std::string, DeviceMap> parseDeviceMaps(const YAML::Node& maps, const std::string& where) {
  std::map<std::string, DeviceMap> out;
  if (!maps.IsMap()) fail(where + lineOf(maps), "expected a mapping");
  for (const auto& peer : maps) {
    const auto peerName = peer.first.as<std::string>();
    const std::string at = where + "." + peerName;
    if (!peer.second.IsMap()) fail(at + lineOf(peer.second), "expected a mapping");
    DeviceMap map;
    for (const auto& kv : peer.second) {
      map[kv.first.as<std::string>()] = scalar<std::string>(kv.second, at, "a device");
    }
    out[peerName] = std::move(map);
  }
  return out;
}

// perPair: a rpcjob.dev/v1alpha1 table (see assignment.h).
WorkerEntry parseWorker(const YAML::Node& node, const std::string& where, bool perPair) {
  if (!node.IsMap()) fail(where + lineOf(node), "expected a mapping");
  if (!perPair) {
    for (const char* key : {"deviceMaps", "channels"}) {
      if (node[key]) {
        fail(where + "." + key + lineOf(node[key]),
             std::string("per-pair tables are apiVersion ") + kAssignmentPerPairApiVersion +
                 "; this version carries explicitDeviceMaps and derives the rest");
      }
    }
  }
  checkKeys(node,
            perPair ? std::set<std::string>{"name", "rank", "group", "address", "metricsPort",
                                            "node", "pod", "gpus", "deviceMaps", "channels"}
                    : std::set<std::string>{"name", "rank", "group", "address", "metricsPort",
                                            "node", "pod", "gpus", "explicitDeviceMaps"},
            where);
  WorkerEntry w;
  if (!node["name"]) fail(where, "missing field 'name'");
  if (!node["rank"]) fail(where, "missing field 'rank'");
  if (!node["address"]) fail(where, "missing field 'address'");
  w.name = scalar<std::string>(node["name"], where + ".name", "a string");
  w.rank = scalar<int>(node["rank"], where + ".rank", "an integer");
  w.address = scalar<std::string>(node["address"], where + ".address", "a string");
  if (node["group"]) w.group = scalar<std::string>(node["group"], where + ".group", "a string");
  if (node["metricsPort"]) {
    w.metricsPort = scalar<int>(node["metricsPort"], where + ".metricsPort", "an integer");
  }
  if (node["node"]) w.node = scalar<std::string>(node["node"], where + ".node", "a string");
  if (node["pod"]) w.pod = scalar<std::string>(node["pod"], where + ".pod", "a string");
  if (const auto gpus = node["gpus"]) {
    if (!gpus.IsSequence()) fail(where + ".gpus" + lineOf(gpus), "expected a list");
    for (std::size_t i = 0; i < gpus.size(); ++i) {
      w.gpus.push_back(
          scalar<int>(gpus[i], where + ".gpus[" + std::to_string(i) + "]", "an integer"));
    }
  }
  const char* mapsKey = perPair ? "deviceMaps" : "explicitDeviceMaps";
  if (const auto maps = node[mapsKey]) {
    w.explicitDeviceMaps = parseDeviceMaps(maps, where + "." + mapsKey);
  }
  if (perPair) {
    if (const auto channels = node["channels"]) {  // checked, then dropped (see assignment.h)
      if (!channels.IsMap()) fail(where + ".channels" + lineOf(channels), "expected a mapping");
      for (const auto& peer : channels) {
        stringList(peer.second, where + ".channels." + peer.first.as<std::string>());
      }
    }
  }
  return w;
}

std::map<std::string, NodeLinks> parseNodes(const YAML::Node& nodes) {
  std::map<std::string, NodeLinks> out;
  if (!nodes) return out;
  if (!nodes.IsMap()) fail("nodes" + lineOf(nodes), "expected a mapping");
  for (const auto& kv : nodes) {
    const auto name = kv.first.as<std::string>();
    NodeLinks links;
    for (const auto& capability : stringList(kv.second, "nodes." + name)) {
      if (capability == "rdma") {
        links.rdma = true;
      } else if (capability == "nvlink") {
        links.nvlink = true;
      } else {
        fail("nodes." + name + lineOf(kv.second),
             "unknown capability '" + capability + "' (known: rdma, nvlink)");
      }
    }
    out[name] = links;
  }
  return out;
}

bool isDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

bool isHostPort(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  const std::string port = address.substr(colon + 1);
  if (port.size() > 5) return false;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
  }
  const int value = std::stoi(port);
  return value > 0 && value < 65536;
}

// A map given both ways must be one the inverse of the other: the derived map of
// a pair must not depend on which side derives it.
void checkInverses(const Assignment& a) {
  std::map<std::string, const WorkerEntry*> byName;
  for (const auto& w : a.workers) byName[w.name] = &w;
  for (std::size_t i = 0; i < a.workers.size(); ++i) {
    const auto& w = a.workers[i];
    for (const auto& [peer, map] : w.explicitDeviceMaps) {
      const auto& back = byName[peer]->explicitDeviceMaps;
      const auto reverse = back.find(w.name);
      if (reverse == back.end()) continue;
      DeviceMap inverse;
      for (const auto& [from, to] : map) inverse[to] = from;
      if (inverse != reverse->second) {
        fail("workers[" + std::to_string(i) + "].explicitDeviceMaps." + peer,
             "not the inverse of " + peer + "'s map to " + w.name);
      }
    }
  }
}

}  // namespace

std::optional<int> parseDevice(const std::string& device) {
  if (device == "cpu") return -1;
  const std::string prefix = "cuda:";
  if (device.compare(0, prefix.size(), prefix) != 0 || device.size() == prefix.size()) {
    return std::nullopt;
  }
  const std::string index = device.substr(prefix.size());
  if (index.size() > 4) return std::nullopt;
  for (char c : index) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoi(index);
}

const WorkerEntry* Assignment::byName(const std::string& name) const {
  for (const auto& w : workers) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

NodeLinks Assignment::linksOf(const std::string& node) const {
  const auto it = nodes.find(node);
  return it == nodes.end() ? NodeLinks{} : it->second;
}

const WorkerEntry* Assignment::byRank(int rank) const {
  for (const auto& w : workers) {
    if (w.rank == rank) return &w;
  }
  return nullptr;
}

void validateAssignment(Assignment& a) {
  if (a.workers.empty()) fail("workers", "at least one worker is required");
  const int n = a.worldSize();
  std::set<std::string> names;
  std::vector<bool> seenRank(n, false);
  for (std::size_t i = 0; i < a.workers.size(); ++i) {
    const auto& w = a.workers[i];
    const std::string where = "workers[" + std::to_string(i) + "]";
    if (!isDnsLabel(w.name)) {
      fail(where + ".name", "'" + w.name + "' is not a DNS label (a-z, 0-9, '-', at most 63)");
    }
    if (!names.insert(w.name).second)
      fail(where + ".name", "duplicate worker name '" + w.name + "'");
    if (w.rank < 0 || w.rank >= n) {
      fail(where + ".rank",
           "rank " + std::to_string(w.rank) + " is outside 0.." + std::to_string(n - 1));
    }
    if (seenRank[w.rank])
      fail(where + ".rank", "rank " + std::to_string(w.rank) + " is used twice");
    seenRank[w.rank] = true;
    if (!isHostPort(w.address)) fail(where + ".address", "'" + w.address + "' is not host:port");
    if (w.metricsPort < 0 || w.metricsPort > 65535) fail(where + ".metricsPort", "out of range");
    for (int gpu : w.gpus) {
      if (gpu < 0) fail(where + ".gpus", "negative device index");
    }
  }
  for (std::size_t i = 0; i < a.workers.size(); ++i) {
    const auto& w = a.workers[i];
    const std::string where = "workers[" + std::to_string(i) + "]";
    for (const auto& [peer, map] : w.explicitDeviceMaps) {
      const std::string at = where + ".explicitDeviceMaps." + peer;
      if (!names.count(peer)) fail(at, "unknown peer '" + peer + "'");
      if (peer == w.name) fail(at, "a worker has no device map to itself");
      std::set<std::string> targets;
      for (const auto& [from, to] : map) {
        if (!parseDevice(from)) fail(at, "'" + from + "' is not a device (cpu or cuda:N)");
        if (!parseDevice(to)) fail(at, "'" + to + "' is not a device (cpu or cuda:N)");
        if (!targets.insert(to).second) {
          fail(at, "two local devices map to " + to + " (device maps are one-to-one)");
        }
      }
    }
  }
  std::sort(a.workers.begin(), a.workers.end(),
            [](const WorkerEntry& x, const WorkerEntry& y) { return x.rank < y.rank; });
}

Assignment parseAssignment(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw AssignmentError("assignment: not valid YAML: " + std::string(e.what()));
  }
  if (!root.IsMap()) fail("document", "expected a mapping");
  const std::string version =
      root["apiVersion"] ? scalar<std::string>(root["apiVersion"], "apiVersion", "a string")
                         : kAssignmentApiVersion;
  const bool perPair = version == kAssignmentPerPairApiVersion;
  if (!perPair && version != kAssignmentApiVersion) {
    fail("apiVersion", "unsupported version '" + version + "', expected " + kAssignmentApiVersion +
                           " (or " + kAssignmentPerPairApiVersion + ")");
  }
  checkKeys(root,
            perPair ? std::set<std::string>{"apiVersion", "kind", "job", "transports", "channels",
                                            "workers"}
                    : std::set<std::string>{"apiVersion", "kind", "job", "transports", "channels",
                                            "deviceMapMode", "nodes", "workers"},
            "");
  if (root["kind"] && scalar<std::string>(root["kind"], "kind", "a string") != kAssignmentKind) {
    fail("kind", std::string("expected ") + kAssignmentKind);
  }
  Assignment a;
  if (const auto job = root["job"]) {
    if (!job.IsMap()) fail("job" + lineOf(job), "expected a mapping");
    checkKeys(job, {"name", "namespace"}, "job");
    if (job["name"]) a.jobName = scalar<std::string>(job["name"], "job.name", "a string");
    if (job["namespace"]) {
      a.jobNamespace = scalar<std::string>(job["namespace"], "job.namespace", "a string");
    }
  }
  a.transports = stringList(root["transports"], "transports");
  a.channels = stringList(root["channels"], "channels");
  if (perPair) {
    a.deviceMapMode = DeviceMapMode::Explicit;  // its maps are every map there is
  } else if (const auto mode = root["deviceMapMode"]) {
    const auto text = scalar<std::string>(mode, "deviceMapMode", "a string");
    if (text != "Auto" && text != "Explicit") {
      fail("deviceMapMode" + lineOf(mode), "expected Auto or Explicit, got '" + text + "'");
    }
    a.deviceMapMode = text == "Auto" ? DeviceMapMode::Auto : DeviceMapMode::Explicit;
  }
  a.nodes = parseNodes(root["nodes"]);
  const auto workers = root["workers"];
  if (!workers) fail("workers", "missing");
  if (!workers.IsSequence()) fail("workers" + lineOf(workers), "expected a list");
  for (std::size_t i = 0; i < workers.size(); ++i) {
    a.workers.push_back(parseWorker(workers[i], "workers[" + std::to_string(i) + "]", perPair));
  }
  validateAssignment(a);
  // Per-pair tables were never checked for this; each side used its own map.
  if (!perPair) checkInverses(a);
  return a;
}

Assignment loadAssignmentFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw AssignmentError("assignment: cannot read " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return parseAssignment(buffer.str());
  } catch (const AssignmentError& e) {
    throw AssignmentError(path + ": " + e.what());
  }
}

std::string toYaml(const Assignment& a) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "apiVersion" << YAML::Value << kAssignmentApiVersion;
  out << YAML::Key << "kind" << YAML::Value << kAssignmentKind;
  out << YAML::Key << "job" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << a.jobName;
  out << YAML::Key << "namespace" << YAML::Value << a.jobNamespace;
  out << YAML::EndMap;
  out << YAML::Key << "transports" << YAML::Value << YAML::Flow << a.transports;
  out << YAML::Key << "channels" << YAML::Value << YAML::Flow << a.channels;
  out << YAML::Key << "deviceMapMode" << YAML::Value
      << (a.deviceMapMode == DeviceMapMode::Auto ? "Auto" : "Explicit");
  out << YAML::Key << "nodes" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, links] : a.nodes) {
    std::vector<std::string> capabilities;
    if (links.rdma) capabilities.push_back("rdma");
    if (links.nvlink) capabilities.push_back("nvlink");
    out << YAML::Key << name << YAML::Value << YAML::Flow << capabilities;
  }
  out << YAML::EndMap;
  // One line per worker: the table is read by every worker of a large job.
  out << YAML::Key << "workers" << YAML::Value << YAML::BeginSeq;
  for (const auto& w : a.workers) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << w.name;
    out << YAML::Key << "rank" << YAML::Value << w.rank;
    out << YAML::Key << "group" << YAML::Value << w.group;
    out << YAML::Key << "address" << YAML::Value << w.address;
    if (w.metricsPort) out << YAML::Key << "metricsPort" << YAML::Value << w.metricsPort;
    out << YAML::Key << "node" << YAML::Value << w.node;
    if (!w.pod.empty()) out << YAML::Key << "pod" << YAML::Value << w.pod;
    out << YAML::Key << "gpus" << YAML::Value << YAML::Flow << w.gpus;
    if (!w.explicitDeviceMaps.empty()) {
      out << YAML::Key << "explicitDeviceMaps" << YAML::Value << YAML::BeginMap;
      for (const auto& [peer, map] : w.explicitDeviceMaps) {
        out << YAML::Key << peer << YAML::Value << YAML::BeginMap;
        for (const auto& [from, to] : map) out << YAML::Key << from << YAML::Value << to;
        out << YAML::EndMap;
      }
      out << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void writeAssignmentFile(const Assignment& a, const std::string& path) {
  // Write then rename, so a reader never sees half a table.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw AssignmentError("assignment: cannot write " + tmp);
    out << toYaml(a);
    if (!out.flush()) throw AssignmentError("assignment: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw AssignmentError("assignment: cannot rename " + tmp + " to " + path);
  }
}

bool operator==(const WorkerEntry& a, const WorkerEntry& b) {
  return a.name == b.name && a.rank == b.rank && a.group == b.group && a.address == b.address &&
         a.metricsPort == b.metricsPort && a.node == b.node && a.pod == b.pod && a.gpus == b.gpus &&
         a.explicitDeviceMaps == b.explicitDeviceMaps;
}

bool operator==(const NodeLinks& a, const NodeLinks& b) {
  return a.rdma == b.rdma && a.nvlink == b.nvlink;
}

bool operator==(const Assignment& a, const Assignment& b) {
  return a.jobName == b.jobName && a.jobNamespace == b.jobNamespace &&
         a.transports == b.transports && a.channels == b.channels &&
         a.deviceMapMode == b.deviceMapMode && a.nodes == b.nodes && a.workers == b.workers;
}

}  // namespace rpcjob
