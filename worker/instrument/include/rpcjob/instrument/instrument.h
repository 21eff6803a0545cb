#pragma once

// Instrumented TensorPipe channels and transports.
//
// instrumentChannel() / instrumentTransport() wrap a TensorPipe context in a
// decorator that forwards every call to it and counts, per channel (or
// transport), direction, peer and device pair, what it moves. Register the
// decorator under the same name as the context it wraps:
//
//   auto metrics = std::make_shared<rpcjob::metrics::Metrics>(...);
//   tensorpipe::Context context(tensorpipe::ContextOptions().name(workerName));
//   context.registerTransport(0, "uv", rpcjob::instrument::instrumentTransport(
//       "uv", tensorpipe::transport::uv::create(), metrics->channels()));
//   context.registerChannel(0, "basic", rpcjob::instrument::instrumentChannel(
//       "basic", tensorpipe::channel::basic::create(), metrics->channels()));
//   auto pipe = context.connect(url, tensorpipe::PipeOptions().remoteName(peerName));
//
// The decorators are invisible on the wire: same device descriptors, domain
// descriptors, canCommunicateWithRemote answers and bytes, so a peer without
// them interoperates.
//
// The peer label. TensorPipe's contexts are shared by all pipes, and a channel
// is created per pipe without being told the peer. What it is told is its id,
// through setId(), right after creation and before its first send/recv:
// "<pipe id>.ch_<channel>" (connections: "<pipe id>.tr_<t>", ".d.tr_", ".r.tr_",
// ".ch_<channel>_<n>"). TensorPipe builds the pipe id from the context's name
// and the remote context's name when both are known:
//   connecting side:  "<context name>_to_<PipeOptions::remoteName>"
//   accepting side:   "<listener id>_from_<remote context name>", the remote
//                     name coming from the peer's handshake (its ContextOptions name)
// So the runtime gets correct peer labels by doing what PyTorch's agent does:
// name every tensorpipe::Context after its worker (ContextOptions().name) and
// pass the peer's worker name as PipeOptions().remoteName on connect. Nothing
// else is needed: no thread-locals, no lookups per message. A pipe without those
// names is counted under peer "unknown". Worker names must not contain '.'
// (Kubernetes names cannot) for the id to parse unambiguously.
//
// Lifetime: the ChannelMetrics must outlive the tensorpipe::Context (close() and
// join() it first): callbacks still in flight record into it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <tensorpipe/channel/context.h>
#include <tensorpipe/transport/context.h>

namespace rpcjob {
namespace metrics {
class ChannelMetrics;
struct TransferHandles;
}  // namespace metrics

namespace instrument {

// Reports the duration of one successful transfer. Copyable, cheap.
struct TransferReport {
  const metrics::TransferHandles* handles;
  std::size_t length;
  void operator()(double seconds) const noexcept;
};

// The seam for how a transfer's duration is measured. Without a timer (the
// default) a transfer lasts from the send()/recv() call to its completion
// callback, taken with std::chrono::steady_clock.
//
// That is right for CPU channels, not for CUDA ones: their callback fires when
// the copies are enqueued on the stream, not when they are done. A CUDA timer
// records a cudaEvent on the buffer's stream in begin() (CudaBuffer::stream,
// through buffer.unwrap<tensorpipe::CudaBuffer>()) and another in end(), and
// reports the elapsed time once the second event completes (polled from a
// thread of its own): the callback to TensorPipe is never delayed.
//
// Thread safety: begin() and end() are called on TensorPipe's threads,
// concurrently for different transfers.
class TransferTimer {
 public:
  virtual ~TransferTimer() = default;
  // Called in send()/recv() before forwarding; the token is handed to end().
  virtual std::uint64_t begin(const tensorpipe::Buffer& buffer) noexcept = 0;
  // Called from the completion callback of a successful transfer, before the
  // caller's callback. Must call report(seconds) exactly once, now or later,
  // from any thread.
  virtual void end(std::uint64_t token, TransferReport report) noexcept = 0;
};

// Wraps a channel context. `name` must be the name it is registered under
// (it becomes the `channel` label). `timer` may be null (steady clock).
std::shared_ptr<tensorpipe::channel::Context> instrumentChannel(
    std::string name, std::shared_ptr<tensorpipe::channel::Context> inner,
    metrics::ChannelMetrics& metrics, std::shared_ptr<TransferTimer> timer = nullptr);

// Wraps a transport context. `name` must be the name it is registered under
// (it becomes the `transport` label).
std::shared_ptr<tensorpipe::transport::Context> instrumentTransport(
    std::string name, std::shared_ptr<tensorpipe::transport::Context> inner,
    metrics::ChannelMetrics& metrics);

}  // namespace instrument
}  // namespace rpcjob
