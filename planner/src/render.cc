#include "rpcjob/planner/render.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

#include "rpcjob/assignment/pair_links.h"

namespace rpcjob::planner {
namespace {

// Rows beyond this are summarised: a 1024-worker job has half a million pairs.
constexpr std::size_t kMaxPairRows = 200;
constexpr std::size_t kMaxYamlPairs = 10000;

struct PairRow {
  const WorkerEntry* from;
  const WorkerEntry* to;
  std::vector<std::string> channels;
  DeviceMap map;
};

// The first `limit` ordered pairs in rank order, derived as the runtime derives
// them (pair_links.h); `total` gets the number of pairs.
std::vector<PairRow> pairRows(const Assignment& a, std::size_t limit, std::size_t& total) {
  const std::size_t n = a.workers.size();
  total = n * (n - 1);
  std::vector<PairRow> rows;
  for (const auto& from : a.workers) {
    for (const auto& to : a.workers) {
      if (rows.size() == limit) return rows;
      if (&from == &to) continue;
      rows.push_back(
          {&from, &to, linkBetween(a, from, to).channels, deviceMapBetween(a, from, to)});
    }
  }
  return rows;
}

std::string joinInts(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out.empty() ? "-" : out;
}

std::string join(const std::vector<std::string>& values, const char* separator = ",") {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : separator) + v;
  return out.empty() ? "-" : out;
}

std::string mapText(const DeviceMap& map) {
  std::string out;
  for (const auto& [from, to] : map) out += (out.empty() ? "" : " ") + from + "->" + to;
  return out.empty() ? "-" : out;
}

// Left-aligned columns, two spaces apart.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::ostringstream out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out << line << "\n";
  }
  return out.str();
}

std::vector<std::string> settings(const PodPlan& pod) {
  std::vector<std::string> out;
  if (pod.shmVolume) out.push_back("shm-volume");
  if (pod.shareProcessNamespace) out.push_back("shareProcessNamespace");
  for (const auto& c : pod.capabilities) out.push_back("cap:" + c);
  if (pod.requests.rdma > 0) out.push_back("rdma/hca:" + std::to_string(pod.requests.rdma));
  return out;
}

}  // namespace

std::string renderTable(const Plan& plan) {
  std::ostringstream out;
  out << toString(plan.outcome) << ": " << plan.message << "\n";
  if (!plan.planned()) return out.str();
  std::vector<std::vector<std::string>> workers = {
      {"RANK", "NAME", "GROUP", "NODE", "POD", "GPUS", "ADDRESS", "METRICS"}};
  for (const auto& w : plan.assignment.workers) {
    workers.push_back({std::to_string(w.rank), w.name, w.group, w.node, w.pod.empty() ? "-" : w.pod,
                       joinInts(w.gpus), w.address,
                       w.metricsPort ? std::to_string(w.metricsPort) : "-"});
  }
  out << "\n" << table(workers);
  if (!plan.pods.empty()) {
    std::vector<std::vector<std::string>> pods = {{"POD", "NODE", "WORKERS", "GPUS", "SETTINGS"}};
    for (const auto& p : plan.pods) {
      pods.push_back({p.name, p.node, join(p.workers), std::to_string(p.requests.gpus),
                      join(settings(p), " ")});
    }
    out << "\n" << table(pods);
  }
  std::vector<std::vector<std::string>> pairs = {{"FROM", "TO", "CHANNELS", "DEVICE MAP"}};
  std::size_t total = 0;
  for (const auto& row : pairRows(plan.assignment, kMaxPairRows, total)) {
    pairs.push_back({row.from->name, row.to->name, join(row.channels), mapText(row.map)});
  }
  if (pairs.size() > 1) out << "\n" << table(pairs);
  if (total > kMaxPairRows) {
    out << "... and " << (total - kMaxPairRows) << " more pairs (see the YAML output)\n";
  }
  for (const auto& note : plan.notes) out << "note: " << note << "\n";
  return out.str();
}

std::string renderYaml(const Plan& plan) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "outcome" << YAML::Value << toString(plan.outcome);
  out << YAML::Key << "reason" << YAML::Value << plan.reason;
  out << YAML::Key << "message" << YAML::Value << plan.message;
  if (!plan.notes.empty()) out << YAML::Key << "notes" << YAML::Value << plan.notes;
  if (plan.planned()) {
    out << YAML::Key << "pods" << YAML::Value << YAML::BeginSeq;
    for (const auto& p : plan.pods) {
      out << YAML::BeginMap;
      out << YAML::Key << "name" << YAML::Value << p.name;
      out << YAML::Key << "node" << YAML::Value << p.node;
      out << YAML::Key << "workers" << YAML::Value << YAML::Flow << p.workers;
      out << YAML::Key << "gpus" << YAML::Value << p.requests.gpus;
      out << YAML::Key << "shmVolume" << YAML::Value << p.shmVolume;
      out << YAML::Key << "shareProcessNamespace" << YAML::Value << p.shareProcessNamespace;
      out << YAML::Key << "capabilities" << YAML::Value << YAML::Flow << p.capabilities;
      out << YAML::Key << "rdmaHca" << YAML::Value << p.requests.rdma;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
    out << YAML::Key << "assignment" << YAML::Value << YAML::Load(toYaml(plan.assignment));
    // What the runtime derives from the table, pair by pair.
    std::size_t total = 0;
    out << YAML::Key << "pairs" << YAML::Value << YAML::BeginSeq;
    for (const auto& row : pairRows(plan.assignment, kMaxYamlPairs, total)) {
      out << YAML::Flow << YAML::BeginMap;
      out << YAML::Key << "from" << YAML::Value << row.from->name;
      out << YAML::Key << "to" << YAML::Value << row.to->name;
      out << YAML::Key << "channels" << YAML::Value << YAML::Flow << row.channels;
      out << YAML::Key << "deviceMap" << YAML::Value << YAML::Flow << row.map;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
    if (total > kMaxYamlPairs)
      out << YAML::Key << "morePairs" << YAML::Value << total - kMaxYamlPairs;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace rpcjob::planner
