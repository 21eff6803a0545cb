#pragma once
// A plan's per-pair channels and device maps (every ordered pair), its pods'
// settings and its notes, as text: what the equivalence test compares.

#include <sstream>
#include <string>

#include "rpcjob/assignment/pair_links.h"
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
  // What the workers read: the table after a trip through its text.
  const Assignment a = plan.planned() ? parseAssignment(toYaml(plan.assignment)) : Assignment{};
  for (const auto& w : a.workers) {
    out << "worker " << w.rank << " " << w.name << " node=" << w.node << " pod=" << w.pod
        << " gpus=";
    for (int g : w.gpus) out << g << ";";
    out << "\n";
  }
  for (const auto& w : a.workers) {
    for (const auto& peer : a.workers) {
      if (peer.name == w.name) continue;
      // Derived from the compact table, as the runtime derives them.
      out << w.name << " -> " << peer.name << ": [" << joinText(linkBetween(a, w, peer).channels)
          << "] {";
      for (const auto& [from, to] : deviceMapBetween(a, w, peer)) out << from << ">" << to << " ";
      out << "}\n";
    }
  }
  return out.str();
}

}  // namespace rpcjob::planner::testing
