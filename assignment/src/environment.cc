#include "rpcjob/assignment/environment.h"

#include <cstdlib>
#include <sstream>

namespace rpcjob {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

int parseInt(const std::string& text, const char* what) {
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw AssignmentError(std::string(what) + "='" + text + "' is not an integer");
  }
  return value;
}

}  // namespace

Assignment assignmentFromPeerList(const std::string& list) {
  Assignment a;
  std::stringstream in(list);
  std::string item;
  int rank = 0;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto at = item.find('@');
    if (at == std::string::npos) {
      throw AssignmentError(std::string(kEnvPeers) + ": '" + item + "' is not name@host:port");
    }
    WorkerEntry w;
    w.name = item.substr(0, at);
    w.address = item.substr(at + 1);
    w.rank = rank++;
    a.workers.push_back(std::move(w));
  }
  try {
    validateAssignment(a);
  } catch (const AssignmentError& e) {
    throw AssignmentError(std::string(kEnvPeers) + ": " + e.what());
  }
  return a;
}

Identity identityFromEnvironment() {
  Identity id;
  const std::string path = env(kEnvAssignmentPath);
  const std::string peers = env(kEnvPeers);
  if (!path.empty()) {
    id.assignment = loadAssignmentFile(path);
  } else if (!peers.empty()) {
    id.assignment = assignmentFromPeerList(peers);
  } else {
    throw AssignmentError(std::string("no peer table: set ") + kEnvAssignmentPath + " or " +
                          kEnvPeers);
  }
  const std::string name = env(kEnvWorkerName);
  const std::string rankText = env(kEnvRank);
  const WorkerEntry* self = nullptr;
  if (!name.empty()) {
    self = id.assignment.byName(name);
    if (!self) throw AssignmentError("worker '" + name + "' is not in the peer table");
    if (!rankText.empty() && parseInt(rankText, kEnvRank) != self->rank) {
      throw AssignmentError(std::string(kEnvRank) + "=" + rankText + " but the table gives '" +
                            name + "' rank " + std::to_string(self->rank));
    }
  } else if (!rankText.empty()) {
    self = id.assignment.byRank(parseInt(rankText, kEnvRank));
    if (!self) throw AssignmentError("rank " + rankText + " is not in the peer table");
  } else {
    throw AssignmentError(std::string("who am I: set ") + kEnvWorkerName + " or " + kEnvRank);
  }
  const std::string world = env(kEnvWorldSize);
  if (!world.empty() && parseInt(world, kEnvWorldSize) != id.assignment.worldSize()) {
    throw AssignmentError(std::string(kEnvWorldSize) + "=" + world + " but the table has " +
                          std::to_string(id.assignment.worldSize()) + " workers");
  }
  id.name = self->name;
  id.rank = self->rank;
  return id;
}

}  // namespace rpcjob
