#include "nvlink_channel.h"

#include <cuda_runtime.h>
#include <unistd.h>

// PyTorch's libtorch lacks these two interface headers; the CUDA build finds
// Debian's libtensorpipe-dev copies through RPCJOB_TENSORPIPE_EXTRA_INCLUDE_DIR,
// searched after libtorch's include folder (see README.md here).
#include <tensorpipe/channel/channel.h>
#include <tensorpipe/tensorpipe_cuda.h>
#include <tensorpipe/transport/connection.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "../channels/copy_context.h"
#include "../trace/trace.h"
#include "cuda_error.h"
#include "device_scope.h"
#include "event_poller.h"
#include "ipc_cache.h"
#include "nvlink_copy.h"
#include "nvlink_descriptor.h"

namespace rpcjob::runtime::cuda {
namespace {

using channels::ChannelError;
using channels::CopyChannel;
using channels::CopyChannelBase;
using channels::CopyContext;
using channels::CopyKind;
using tensorpipe::Buffer;
using tensorpipe::CudaBuffer;
using tensorpipe::Device;
using tensorpipe::Error;

size_t envSize(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return static_cast<size_t>(std::strtoull(v, nullptr, 10));
}

std::string bootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// One control message; fixed size, both ways.
// WireMessage::flags of an ack.
// kAckCopied: the copy has completed (the receiver saw its "done" event on the host:
// both processes share one GPU); the sender completes without a GPU-side wait.
inline constexpr uint32_t kAckCopied = 1;

struct WireMessage {
  CopyKind kind;
  uint32_t flags = 0;  // was padding (always 0): peers that predate a flag ignore it
  uint64_t seq = 0;
  int32_t pid = 0;
  int32_t device = 0;
  uint64_t base = 0;      // sender's allocation base
  uint64_t bufferId = 0;  // CUDA's id of that allocation (never reused in a process)
  uint64_t offset = 0;
  uint64_t length = 0;
  cudaIpcMemHandle_t memory;
  cudaIpcEventHandle_t event;  // kSend: sender's "ready"; kAck: receiver's "done"
};
static_assert(sizeof(WireMessage) == 184, "the wire format peers of older versions read");

struct PendingSend {
  tensorpipe::channel::TSendCallback callback;
  cudaStream_t stream = nullptr;
  int device = 0;
  size_t slot = 0;  // of the sender's "ready" event, held until the ack
};
struct PendingRecv {
  void* ptr;
  cudaStream_t stream;
  int device;
  size_t length;
  tensorpipe::channel::TRecvCallback callback;
};

class NvlinkContext;

class NvlinkContext final : public CopyContext, public std::enable_shared_from_this<NvlinkContext> {
 public:
  NvlinkContext() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      return;
    }
    boot_ = bootId();
    if (boot_.empty()) return;
    streamsPerCopy_ = std::max<size_t>(1, envSize("RPCJOB_NVLINK_STREAMS", 1));
    splitBytes_ = envSize("RPCJOB_NVLINK_SPLIT_BYTES", size_t{32} << 20);
    const char* copy = std::getenv("RPCJOB_NVLINK_COPY");
    kernelCopy_ = copy != nullptr && std::string(copy) == "kernel";
    ipc_ = sharedIpcCache();
    if (ipc_->deviceCount() != count) return;
    for (int i = 0; i < count; ++i) {
      int sms = 0;
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, i);
      smCount_.push_back(sms);
    }
    std::unordered_map<Device, std::string> descriptors;
    for (int i = 0; i < count; ++i) {
      NvlinkDescriptor d;
      d.boot = boot_;
      d.index = i;
      d.pid = static_cast<int>(getpid());
      d.bus = ipc_->bus(i);
      for (int j = 0; j < count; ++j) {
        int can = 0;
        if (j != i && cudaDeviceCanAccessPeer(&can, i, j) == cudaSuccess && can) {
          d.peers.push_back(ipc_->bus(j));
        }
      }
      descriptors[Device{tensorpipe::kCudaDeviceType, i}] = encodeNvlinkDescriptor(d);
    }
    copyStreams_.resize(count);
    setViable(std::move(descriptors));
  }

  bool canCommunicateWithRemote(const std::string& local,
                                const std::string& remote) const override {
    NvlinkDescriptor a;
    NvlinkDescriptor b;
    if (!ipc_ || !decodeNvlinkDescriptor(local, a) || !decodeNvlinkDescriptor(remote, b)) {
      return false;
    }
    // Both ends of every device pair pass here during the handshake (TensorPipe's
    // accepting side, rpcjob's channel selection on the connecting one).
    ipc_->learn(a);
    ipc_->learn(b);
    if (a.boot != b.boot || a.pid == b.pid) return false;
    if (a.bus == b.bus) return true;
    auto has = [](const std::vector<std::string>& v, const std::string& s) {
      return std::find(v.begin(), v.end(), s) != v.end();
    };
    return has(a.peers, b.bus) && has(b.peers, a.bus);
  }

  // ---- used by channels (thread safe)

  IpcCache& ipc() { return *ipc_; }

  // Streams the pieces of a large copy run on, with one event each.
  struct CopyStream {
    cudaStream_t stream;
    cudaEvent_t finished;
  };
  const std::vector<CopyStream>& copyStreams(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& streams = copyStreams_[device];
    if (streams.empty()) {
      DeviceScope scope(device);
      for (size_t i = 0; i < streamsPerCopy_; ++i) {
        CopyStream s;
        cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&s.finished, cudaEventDisableTiming);
        streams.push_back(s);
      }
    }
    return streams;
  }

  size_t splitBytes() const { return splitBytes_; }
  size_t streamsPerCopy() const { return streamsPerCopy_; }
  bool kernelCopy() const { return kernelCopy_; }
  int smCount(int device) const { return smCount_[device]; }
  // Copy streams are shared by the channels of a device: one large copy at a
  // time keeps the split meaningful and the stream events unambiguous.
  std::mutex& copyMutex() { return copyMu_; }
  EventPoller& poller() { return poller_; }

 private:
  std::shared_ptr<CopyChannelBase> makeChannel(
      std::shared_ptr<tensorpipe::transport::Connection> connection) override;

  std::string boot_;
  std::shared_ptr<IpcCache> ipc_;  // memory and events traded with peers, and their GPUs
  size_t streamsPerCopy_ = 1;
  size_t splitBytes_ = size_t{32} << 20;
  bool kernelCopy_ = false;
  std::vector<int> smCount_;
  std::mutex mu_;
  std::mutex copyMu_;
  std::vector<std::vector<CopyStream>> copyStreams_;
  EventPoller poller_;  // last: its thread stops before the events in ipc_ go
};

class NvlinkChannel final
    : public CopyChannel<NvlinkChannel, WireMessage, PendingSend, PendingRecv> {
 public:
  NvlinkChannel(std::shared_ptr<NvlinkContext> context,
                std::shared_ptr<tensorpipe::transport::Connection> connection)
      : CopyChannel(std::move(connection)), context_(std::move(context)) {}

 private:
  friend CopyChannel;

  static Error makeError(const std::string& what) {
    return Error(std::make_shared<ChannelError>(kNvlinkChannel, what), __FILE__, __LINE__);
  }

  bool describe(Buffer& buffer, WireMessage& m, PendingSend& s, std::string& error) {
    trace::point("nvlink.describe", m.length);  // TensorPipe's write path apart from ours
    const CudaBuffer& b = buffer.unwrap<CudaBuffer>();
    int device = buffer.device().index;
    m.pid = static_cast<int32_t>(getpid());
    m.device = device;
    ExportedMemory exported;
    if (!context_->ipc().exportMemory(b.ptr, device, exported, error)) return false;
    m.base = exported.base;
    m.bufferId = exported.bufferId;
    m.offset = exported.offset;
    m.memory = exported.handle;
    trace::point("nvlink.exported", m.length);
    cudaEvent_t ready;
    s.slot = context_->ipc().takeReady(device, ready, m.event);
    {
      DeviceScope scope(device);
      cudaEventRecord(ready, b.stream);
    }
    trace::point("nvlink.send", m.length);
    s.stream = b.stream;
    s.device = device;
    return true;
  }

  void release(PendingSend& s) { context_->ipc().releaseReady(s.device, s.slot); }

  Error acked(PendingSend& s, const WireMessage& ack) {
    trace::point("nvlink.acked", ack.seq);
    if (ack.flags & kAckCopied) {  // copied already: nothing left to order after
      context_->ipc().releaseReady(s.device, s.slot);
      return Error::kSuccess;
    }
    std::string error;
    cudaEvent_t done = context_->ipc().openEvent(ack.event, s.device, error);
    if (done != nullptr) {
      DeviceScope scope(s.device);
      cudaStreamWaitEvent(s.stream, done, 0);  // the memory is free once the copy is
    }
    context_->ipc().releaseReady(s.device, s.slot);
    return done != nullptr ? Error::kSuccess : makeError(error);
  }

  static PendingRecv pendingRecv(Buffer& buffer, size_t length,
                                 tensorpipe::channel::TRecvCallback callback) {
    const CudaBuffer& b = buffer.unwrap<CudaBuffer>();
    return PendingRecv{b.ptr, b.stream, buffer.device().index, length, std::move(callback)};
  }

  void copy(PendingRecv r, const WireMessage& m) {
    trace::point("nvlink.copy", m.seq);
    std::string error;
    if (m.length != r.length) {
      error = "length mismatch: " + std::to_string(m.length) + " sent, " +
              std::to_string(r.length) + " expected";
    }
    bool sameGpu = false;
    uint64_t mapped = 0;
    void* base = error.empty() ? context_->ipc().openMemory(
                                     PeerMemory{m.pid, m.device, m.base, m.bufferId, m.memory},
                                     r.device, sameGpu, mapped, error)
                               : nullptr;
    if (base != nullptr && (m.offset > mapped || m.length > mapped - m.offset)) {
      error = "a copy of " + std::to_string(m.length) + " bytes at offset " +
              std::to_string(m.offset) + " of a peer's allocation of " + std::to_string(mapped);
      base = nullptr;
    }
    cudaEvent_t ready =
        base != nullptr ? context_->ipc().openEvent(m.event, r.device, error) : nullptr;
    if (ready == nullptr) {
      r.callback(makeError(error));
      fail(error);
      return;
    }
    const char* src = static_cast<const char*>(base) + m.offset;
    if (sameGpu) {
      // No GPU-side wait on the other process's event (event_poller.h says why).
      auto self = shared_from_this();
      context_->poller().whenComplete(ready, r.device,
                                      [self, r, m, src](const std::string& e) mutable {
                                        self->copyOnSharedGpu(std::move(r), m, src, e);
                                      });
      return;
    }
    auto ack = ackFor(m);
    {
      DeviceScope scope(r.device);
      // One copy stream (the default) splits nothing: the copy goes on the
      // receive stream itself, without the two event hops a copy stream adds.
      if (r.length < context_->splitBytes() || context_->streamsPerCopy() == 1) {
        cudaStreamWaitEvent(r.stream, ready, 0);
        trace::point("nvlink.waits", m.seq);
        copyOn(r.ptr, src, r.length, r.device, r.stream);
      } else {
        std::lock_guard<std::mutex> copyLock(context_->copyMutex());
        const auto& streams = context_->copyStreams(r.device);
        size_t n = streams.size();
        size_t piece = ((r.length + n - 1) / n + 255) / 256 * 256;
        for (size_t i = 0; i < n; ++i) {
          size_t offset = i * piece;
          if (offset >= r.length) break;
          size_t len = std::min(piece, r.length - offset);
          cudaStreamWaitEvent(streams[i].stream, ready, 0);
          copyOn(static_cast<char*>(r.ptr) + offset, src + offset, len, r.device,
                 streams[i].stream);
          cudaEventRecord(streams[i].finished, streams[i].stream);
          cudaStreamWaitEvent(r.stream, streams[i].finished, 0);
        }
      }
      trace::point("nvlink.enqueued", m.seq);
      cudaEvent_t done;
      context_->ipc().takeDone(r.device, r.stream, done, ack->event);
      cudaEventRecord(done, r.stream);
      trace::point("nvlink.recorded", m.seq);
      cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) error = cudaWhat("copy", e);
    }
    acknowledge(std::move(ack), r, error);
  }

  // The sender's data is ready (seen on the host): one device-to-device copy on
  // the receiver's stream; the receive completes at once (the data is ordered on
  // that stream) and the ack goes once the copy has finished, flagged so.
  void copyOnSharedGpu(PendingRecv r, const WireMessage& m, const char* src,
                       const std::string& readyError) {
    trace::point("nvlink.ready", m.seq);
    std::string error = readyError;
    auto ack = ackFor(m);
    cudaEvent_t done = nullptr;
    if (error.empty()) {
      DeviceScope scope(r.device);
      copyOn(r.ptr, src, r.length, r.device, r.stream);
      context_->ipc().takeDone(r.device, r.stream, done, ack->event);
      cudaEventRecord(done, r.stream);
      cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) error = cudaWhat("copy", e);
    }
    if (!error.empty()) {
      acknowledge(std::move(ack), r, error);
      return;
    }
    ack->flags = kAckCopied;
    r.callback(Error::kSuccess);
    auto self = shared_from_this();
    context_->poller().whenComplete(done, r.device, [self, ack](const std::string& e) {
      if (!e.empty()) {
        self->fail(e);
        return;
      }
      trace::point("nvlink.copied", ack->seq);
      self->acknowledgeLater(ack);
    });
  }

  void copyOn(void* dst, const void* src, size_t length, int device, cudaStream_t stream) {
    if (context_->kernelCopy() &&
        launchPullCopy(dst, src, length, context_->smCount(device), stream)) {
      return;
    }
    cudaMemcpyAsync(dst, src, length, cudaMemcpyDeviceToDevice, stream);
  }

  std::shared_ptr<NvlinkContext> context_;
};

std::shared_ptr<CopyChannelBase> NvlinkContext::makeChannel(
    std::shared_ptr<tensorpipe::transport::Connection> connection) {
  return std::make_shared<NvlinkChannel>(shared_from_this(), std::move(connection));
}

}  // namespace

std::shared_ptr<tensorpipe::channel::Context> createNvlinkChannel() {
  return std::make_shared<NvlinkContext>();
}

}  // namespace rpcjob::runtime::cuda
