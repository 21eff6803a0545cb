#include "rpcjob/instrument/peer_id.h"

namespace rpcjob {
namespace instrument {
namespace {

bool startsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string peerFromId(const std::string& contextId, const std::string& id) {
  std::string rest = id;
  if (!contextId.empty() && startsWith(id, contextId)) {
    rest = id.substr(contextId.size());
  }
  std::string::size_type start;
  if (startsWith(rest, "_to_")) {
    start = 4;
  } else if (auto from = rest.find("_from_"); from != std::string::npos) {
    start = from + 6;
  } else if (auto to = rest.find("_to_"); contextId.empty() && to != std::string::npos) {
    start = to + 4;
  } else {
    return "";
  }
  std::string tail = rest.substr(start);
  // Strip the suffix TensorPipe appended to the pipe id: the last ".ch_" or ".tr_".
  const auto ch = tail.rfind(".ch_");
  const auto tr = tail.rfind(".tr_");
  std::string::size_type cut = std::string::npos;
  if (ch != std::string::npos && (tr == std::string::npos || ch > tr)) {
    cut = ch;
  } else if (tr != std::string::npos) {
    cut = tr;
  }
  std::string peer = tail.substr(0, cut);
  if (cut == tr && cut != std::string::npos && (endsWith(peer, ".d") || endsWith(peer, ".r"))) {
    peer.resize(peer.size() - 2);  // descriptor / descriptor-reply connections
  }
  return peer;
}

std::string contextIdFromId(const std::string& id, const std::string& name) {
  for (const char* kind : {".ch_", ".tr_"}) {
    const std::string suffix = kind + name;
    if (endsWith(id, suffix)) {
      return id.substr(0, id.size() - suffix.size());
    }
  }
  return id;
}

}  // namespace instrument
}  // namespace rpcjob
