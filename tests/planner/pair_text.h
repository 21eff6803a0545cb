#pragma once
// A plan's per-pair channels and device maps (every ordered pair), its pods'
// settings and its notes, as text: what the equivalence test compares.

#include <sstream>
#include <string>

#include "rpcjob/planner/plan.h"

namespace rpcjob::planner::testing {

inline std::string joinText(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

inline std::string pairText(const Plan& plan) {
  std::ostringstream out;
  out << toString(plan.outcome) << " " << plan.reason << ": " << plan.message << "\n";
  for (const auto& note : plan.notes) out << "note: " << note << "\n";
  for (const auto& p : plan.pods) {
    out << "pod " << p.name << " shm=" << p.shmVolume << " pid=" << p.shareProcessNamespace
        << " caps=" << joinText(p.capabilities) << " rdma=" << p.requests.rdma << "\n";
  }
  const Assignment& a = plan.assignment;
  for (const auto& w : a.workers) {
    out << "worker " << w.rank << " " << w.name << " node=" << w.node << " pod=" << w.pod
        << " gpus=";
    for (int g : w.gpus) out << g << ";";
    out << "\n";
  }
  for (const auto& w : a.workers) {
    for (const auto& peer : a.workers) {
      if (peer.name == w.name) continue;
      const auto channels = w.channels.find(peer.name);
      const auto map = w.deviceMaps.find(peer.name);
      out << w.name << " -> " << peer.name << ": ["
          << (channels == w.channels.end() ? "" : joinText(channels->second)) << "] {";
      if (map != w.deviceMaps.end()) {
        for (const auto& [from, to] : map->second) out << from << ">" << to << " ";
      }
      out << "}\n";
    }
  }
  return out.str();
}

}  // namespace rpcjob::planner::testing
