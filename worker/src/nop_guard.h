#pragma once
// TensorPipe parses its control messages (the pipe handshake, message
// descriptors, the listener's first packet, mpt's hello) with libnop inside
// Connection::read(AbstractNopHolder&), and a parse failure is an assertion
// there: it throws on a loop thread and the process aborts ("Error reading nop
// object: Unexpected Encoding Type"). Anything that reaches a listening port
// with bytes that are not TensorPipe's (a port scanner, a service of another
// protocol, a worker of another job that took the port) would kill the worker.
//
// These decorators read nop objects as raw frames (the same framing) and parse
// them here: a malformed one closes that connection and fails the read with an
// error, which TensorPipe handles as any broken connection. Every transport
// context the runtime creates, the mpt lanes included, is wrapped.

#include <memory>

namespace tensorpipe::transport {
class Context;
class Listener;
}  // namespace tensorpipe::transport

namespace rpcjob::runtime {

std::shared_ptr<tensorpipe::transport::Context> guardNopReads(
    std::shared_ptr<tensorpipe::transport::Context> inner);
std::shared_ptr<tensorpipe::transport::Listener> guardNopReads(
    std::shared_ptr<tensorpipe::transport::Listener> inner);

}  // namespace rpcjob::runtime
