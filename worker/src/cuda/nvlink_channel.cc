#include "nvlink_channel.h"

#include <cuda.h>
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
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "../channels/copy_context.h"
#include "../trace/trace.h"
#include "event_poller.h"
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

std::string cudaWhat(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorString(e);
}

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

// Sets the current device for a scope.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    changed_ = previous_ != device;
    if (changed_) cudaSetDevice(device);
  }
  // Nothing to restore when unchanged: one CUDA call fewer on every copy's path.
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

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

// Interprocess events of one device, handed out by index.
struct EventPool {
  int device = 0;
  std::vector<cudaEvent_t> events;
  std::vector<cudaIpcEventHandle_t> handles;
  std::vector<size_t> freeList;
  size_t roundRobin = 0;

  size_t take() {
    if (!freeList.empty()) {
      size_t i = freeList.back();
      freeList.pop_back();
      return i;
    }
    return grow();
  }
  size_t grow() {
    DeviceScope scope(device);
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess);
    cudaIpcEventHandle_t h;
    cudaIpcGetEventHandle(&h, e);
    events.push_back(e);
    handles.push_back(h);
    return events.size() - 1;
  }
  // For "done" events: a ring; reusing one early only makes a sender wait longer.
  size_t next(size_t ring) {
    if (events.size() < ring) return grow();
    return roundRobin++ % ring;
  }
  ~EventPool() {
    for (auto e : events) cudaEventDestroy(e);
  }
};

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
    const char* sameGpuBy = std::getenv("RPCJOB_NVLINK_SAME_GPU_BY");
    sameGpuByPointer_ = sameGpuBy != nullptr && std::string(sameGpuBy) == "pointer";
    buses_.resize(count);
    for (int i = 0; i < count; ++i) {
      char bus[32] = {0};
      cudaDeviceGetPCIBusId(bus, sizeof(bus), i);
      buses_[i] = bus;
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
      d.bus = buses_[i];
      for (int j = 0; j < count; ++j) {
        int can = 0;
        if (j != i && cudaDeviceCanAccessPeer(&can, i, j) == cudaSuccess && can) {
          d.peers.push_back(buses_[j]);
        }
      }
      descriptors[Device{tensorpipe::kCudaDeviceType, i}] = encodeNvlinkDescriptor(d);
    }
    copyStreams_.resize(count);
    readyEvents_.resize(count);
    doneEvents_.resize(count);
    for (int i = 0; i < count; ++i) {
      readyEvents_[i].device = i;
      doneEvents_[i].device = i;
    }
    setViable(std::move(descriptors));
  }

  ~NvlinkContext() override {
    for (auto& [key, opened] : opened_) {
      DeviceScope scope(opened.device);
      cudaIpcCloseMemHandle(opened.ptr);
    }
    for (auto& [key, e] : remoteEvents_) cudaEventDestroy(e);
  }

  bool canCommunicateWithRemote(const std::string& local,
                                const std::string& remote) const override {
    NvlinkDescriptor a;
    NvlinkDescriptor b;
    if (!decodeNvlinkDescriptor(local, a) || !decodeNvlinkDescriptor(remote, b)) return false;
    // Both ends of every device pair pass here during the handshake (TensorPipe's
    // accepting side, rpcjob's channel selection on the connecting one).
    peerGpus_.learn(a);
    peerGpus_.learn(b);
    if (a.boot != b.boot || a.pid == b.pid) return false;
    if (a.bus == b.bus) return true;
    auto has = [](const std::vector<std::string>& v, const std::string& s) {
      return std::find(v.begin(), v.end(), s) != v.end();
    };
    return has(a.peers, b.bus) && has(b.peers, a.bus);
  }

  // ---- used by channels (thread safe)

  // The receiver's mapping of a sender's allocation (opened once, cached);
  // sameGpu: the allocation lives on `device` itself (the sender shares our GPU).
  void* openMemory(const WireMessage& m, int device, bool& sameGpu, std::string& error) {
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_pair(m.pid, m.base);
    auto it = opened_.find(key);
    if (it != opened_.end() && it->second.bufferId == m.bufferId && it->second.device == device) {
      sameGpu = it->second.sameGpu;
      return it->second.ptr;
    }
    DeviceScope scope(device);
    if (it != opened_.end()) {  // the sender freed it and reused the address
      cudaIpcCloseMemHandle(it->second.ptr);
      opened_.erase(it);
    }
    void* ptr = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&ptr, m.memory, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      error = cudaWhat("cudaIpcOpenMemHandle", e);
      return nullptr;
    }
    auto bus = sameGpuByPointer_ ? std::nullopt : peerGpus_.busOf(m.pid, m.device);
    if (bus) {
      sameGpu = *bus == buses_[device];
    } else {
      // No descriptor of the sender's GPU seen (a peer that predates its index), or
      // RPCJOB_NVLINK_SAME_GPU_BY=pointer (the former test, for an A/B): the
      // pointer's device ordinal, which names the device of the context that
      // opened it and so errs towards the one-GPU protocol (slower, not wrong).
      int ordinal = -1;
      sameGpu = cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                      reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS &&
                ordinal == device;
    }
    opened_[key] = Opened{ptr, m.bufferId, device, sameGpu};
    return ptr;
  }

  cudaEvent_t openEvent(const cudaIpcEventHandle_t& handle, int device, std::string& error) {
    std::string key(reinterpret_cast<const char*>(&handle), sizeof(handle));
    key += std::to_string(device);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = remoteEvents_.find(key);
    if (it != remoteEvents_.end()) return it->second;
    DeviceScope scope(device);
    cudaEvent_t e = nullptr;
    cudaError_t r = cudaIpcOpenEventHandle(&e, handle);
    if (r != cudaSuccess) {
      cudaGetLastError();
      error = cudaWhat("cudaIpcOpenEventHandle", r);
      return nullptr;
    }
    remoteEvents_[key] = e;
    return e;
  }

  // The sender's IPC handle of an allocation, cached per (base, buffer id).
  bool exportMemory(const void* ptr, int device, WireMessage& m, std::string& error) {
    CUdeviceptr base = 0;
    unsigned long long bufferId = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_BUFFER_ID};
    void* values[] = {&base, &bufferId};
    CUresult r = cuPointerGetAttributes(2, attrs, values, reinterpret_cast<CUdeviceptr>(ptr));
    if (r != CUDA_SUCCESS || base == 0) {
      error = "cuPointerGetAttributes failed (" + std::to_string(static_cast<int>(r)) + ")";
      return false;
    }
    m.base = static_cast<uint64_t>(base);
    m.bufferId = bufferId;
    m.offset = reinterpret_cast<uint64_t>(ptr) - m.base;
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_pair(m.base, m.bufferId);
    auto it = exported_.find(key);
    if (it == exported_.end()) {
      DeviceScope scope(device);
      cudaIpcMemHandle_t h;
      cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
      if (e != cudaSuccess) {
        cudaGetLastError();
        error = cudaWhat("cudaIpcGetMemHandle", e);
        return false;
      }
      // Entries of freed allocations are dropped when the address comes back
      // with a new buffer id.
      for (auto old = exported_.begin(); old != exported_.end();) {
        old = old->first.first == m.base ? exported_.erase(old) : std::next(old);
      }
      it = exported_.emplace(key, h).first;
    }
    m.memory = it->second;
    return true;
  }

  size_t takeReady(int device, cudaEvent_t& event, cudaIpcEventHandle_t& handle) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t i = readyEvents_[device].take();
    event = readyEvents_[device].events[i];
    handle = readyEvents_[device].handles[i];
    return i;
  }
  void releaseReady(int device, size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    readyEvents_[device].freeList.push_back(i);
  }
  void takeDone(int device, cudaEvent_t& event, cudaIpcEventHandle_t& handle) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t i = doneEvents_[device].next(256);
    event = doneEvents_[device].events[i];
    handle = doneEvents_[device].handles[i];
  }

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
  struct Opened {
    void* ptr;
    uint64_t bufferId;
    int device;
    bool sameGpu;
  };

  std::shared_ptr<CopyChannelBase> makeChannel(
      std::shared_ptr<tensorpipe::transport::Connection> connection) override;

  std::string boot_;
  std::vector<std::string> buses_;  // PCI bus id by CUDA index, this process's GPUs
  mutable PeerGpus peerGpus_;       // the peers' GPUs, from their descriptors
  size_t streamsPerCopy_ = 1;
  size_t splitBytes_ = size_t{32} << 20;
  bool kernelCopy_ = false;
  bool sameGpuByPointer_ = false;  // RPCJOB_NVLINK_SAME_GPU_BY=pointer
  std::vector<int> smCount_;
  std::mutex mu_;
  std::mutex copyMu_;
  std::map<std::pair<int, uint64_t>, Opened> opened_;
  std::map<std::pair<uint64_t, uint64_t>, cudaIpcMemHandle_t> exported_;
  std::map<std::string, cudaEvent_t> remoteEvents_;
  std::vector<std::vector<CopyStream>> copyStreams_;
  std::vector<EventPool> readyEvents_;
  std::vector<EventPool> doneEvents_;
  EventPoller poller_;  // last: its thread stops before the events above go
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
    if (!context_->exportMemory(b.ptr, device, m, error)) return false;
    trace::point("nvlink.exported", m.length);
    cudaEvent_t ready;
    s.slot = context_->takeReady(device, ready, m.event);
    {
      DeviceScope scope(device);
      cudaEventRecord(ready, b.stream);
    }
    trace::point("nvlink.send", m.length);
    s.stream = b.stream;
    s.device = device;
    return true;
  }

  void release(PendingSend& s) { context_->releaseReady(s.device, s.slot); }

  Error acked(PendingSend& s, const WireMessage& ack) {
    trace::point("nvlink.acked", ack.seq);
    if (ack.flags & kAckCopied) {  // copied already: nothing left to order after
      context_->releaseReady(s.device, s.slot);
      return Error::kSuccess;
    }
    std::string error;
    cudaEvent_t done = context_->openEvent(ack.event, s.device, error);
    if (done != nullptr) {
      DeviceScope scope(s.device);
      cudaStreamWaitEvent(s.stream, done, 0);  // the memory is free once the copy is
    }
    context_->releaseReady(s.device, s.slot);
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
    void* base = error.empty() ? context_->openMemory(m, r.device, sameGpu, error) : nullptr;
    cudaEvent_t ready = base != nullptr ? context_->openEvent(m.event, r.device, error) : nullptr;
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
      context_->takeDone(r.device, done, ack->event);
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
      context_->takeDone(r.device, done, ack->event);
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
