#pragma once
// Free TCP ports on the loopback interface for the workers' RPC and metrics
// listeners.
//
// How: bind `count` sockets to 127.0.0.1:0 at once (so the ports are distinct),
// read the ports the kernel chose, close the sockets. The race: between closing
// here and the worker binding, another process may take a port; the worker then
// fails to listen, exits non-zero, and the run policy restarts the job (with the
// same ports; a second collision is very unlikely). Handing the bound sockets to
// the workers would close the race but needs every worker program to accept an
// inherited listener, which TensorPipe's listener does not.

#include <vector>

namespace rpcjob::runner {

// Throws std::system_error when a socket cannot be bound.
std::vector<int> pickFreePorts(int count);

}  // namespace rpcjob::runner
