#pragma once

// Reading the peer's name out of the ids TensorPipe gives its objects.
// instrument.h explains where they come from. Pure functions, unit tested.

#include <string>

namespace rpcjob {
namespace instrument {

// The peer in a pipe-derived id (a channel's "<pipe>.ch_basic", a connection's
// "<pipe>.tr_uv", "<pipe>.d.tr_uv", "<pipe>.ch_basic_0"), where the pipe id is
// "<context>_to_<peer>" or "<context>[l<n>]_from_<peer>" (also ".l<n>_from_").
// `contextId` is the local context's id when known (it may itself contain
// "_to_"); empty otherwise. Returns "" when the id names no peer (an unnamed
// pipe "<context>.p<n>", a listener's provisional connection id).
std::string peerFromId(const std::string& contextId, const std::string& id);

// The local context's id from the id TensorPipe gives a registered channel or
// transport context ("<context>.ch_<name>" / "<context>.tr_<name>").
std::string contextIdFromId(const std::string& id, const std::string& name);

}  // namespace instrument
}  // namespace rpcjob
