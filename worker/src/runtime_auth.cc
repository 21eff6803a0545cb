// The runtime's side of pipe authentication (auth/): the gate, and what a
// refused handshake does.
#include <iostream>

#include "runtime_impl.h"

namespace rpcjob::runtime {
namespace {

// A peer's name as TensorPipe reports it is the peer's own claim: printable
// and bounded before it reaches a log.
std::string printable(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 64)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return name.size() > 64 ? out + "..." : out;
}

}  // namespace

void RuntimeImpl::startGate() {
  if (options_.secret.empty()) {
    std::cerr << "rpcjob: worker '" << self().name
              << "': no job secret (RuntimeOptions::secret, RPCJOB_SECRET_FILE): any process "
                 "that reaches this worker's port can call its functions\n";
    return;
  }
  if (options_.secret.size() < auth::kMinSecretBytes) {
    throw RpcError(ErrorCode::kInvalidArgument, self().name,
                   "the job secret is " + std::to_string(options_.secret.size()) +
                       " bytes; at least " + std::to_string(auth::kMinSecretBytes) + " are needed");
  }
  gate_ = std::make_unique<auth::PipeGate>(options_.secret, self().name, options_.handshakeTimeout);
}

auth::PipeGate::Refused RuntimeImpl::handshakeRefused(
    const std::string& peer, std::function<void(const std::string&)> then) {
  return [this, peer, then = std::move(then)](auth::Failure reason, const std::string& detail) {
    const std::string why = "pipe " + std::string(then ? "to" : "from") + " '" + printable(peer) +
                            "' refused in its handshake (" + auth::failureName(reason) +
                            "): " + detail;
    // A dialled peer that is not listening yet is no authentication failure:
    // the start-up redials it.
    if (!(then && reason == auth::Failure::kClosed)) {
      std::cerr << "rpcjob: worker '" << self().name << "': " << why << "\n";
      if (options_.observer) options_.observer->handshakeFailed(auth::failureName(reason));
    }
    if (then) then(why);
  };
}

}  // namespace rpcjob::runtime
