#include "cuda_lane.h"

#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/cuda_error.h"
#include "cuda/cuda_future.h"
#include "cuda/cuda_serialization.h"
#include "cuda/device_scope.h"
#include "cuda/ipc_cache.h"
#include "handles_wire.h"
#include "handoffs.h"
#include "serialization.h"
#include "trace/trace.h"

namespace rpcjob::runtime::cuda_lane {
namespace {

using cuda::cudaWhat;

std::atomic<uint64_t> framesLent{0};
std::atomic<uint64_t> framesCopied{0};
std::atomic<uint64_t> framesReceived{0};
std::atomic<uint64_t> tensorsReceived{0};

// The bytes of one element of `dtype`, 0 for one that cannot travel (one that
// prepareRead refuses: dtypeProblem).
size_t elementSizeOf(int8_t dtype) {
  return dtypeProblem(dtype).empty() ? c10::elementSize(static_cast<c10::ScalarType>(dtype)) : 0;
}

template <typename Handle>
wire::IpcHandle toWire(const Handle& h) {
  static_assert(sizeof(Handle) == wire::kIpcHandleBytes, "CUDA's IPC handles are 64 bytes");
  wire::IpcHandle out;
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

template <typename Handle>
Handle fromWire(const wire::IpcHandle& w) {
  Handle h;
  std::memcpy(&h, w.data(), sizeof(h));
  return h;
}

}  // namespace

bool enabledHere() {
  static const bool enabled = [] {
    const char* env = std::getenv("RPCJOB_LANE_CUDA");
    if (env != nullptr && std::string(env) == "0") return false;
    return cuda::deviceCount() > 0;
  }();
  return enabled;
}

Counters counters() {
  return {framesLent.load(), framesCopied.load(), framesReceived.load(), tensorsReceived.load()};
}

// A send stream's "ready" event, held until the server's answer.
struct ReadyEvent {
  int device = 0;
  cudaStream_t stream = nullptr;
  size_t slot = 0;
  wire::IpcHandle handle{};
};

struct Sender::Lent {
  std::shared_ptr<OutgoingMessage> message;
  std::vector<ReadyEvent> ready;
  std::vector<uint64_t> observed;  // the observer's tokens, one per tensor
};

struct Sender::State {
  LanePairs pairs;
  std::string peer;
  std::shared_ptr<DeviceTransferObserver> observer;
  std::shared_ptr<cuda::IpcCache> ipc = cuda::sharedIpcCache();
  Handoffs<Lent> lent;
  // Messages whose copies may still run on the server (no "done" to wait for):
  // kept while this lives, not handed back to the allocator at once.
  std::mutex abandonedMu;
  std::vector<std::shared_ptr<OutgoingMessage>> abandoned;
  void keep(std::shared_ptr<OutgoingMessage> m) {
    std::lock_guard<std::mutex> lock(abandonedMu);
    abandoned.push_back(std::move(m));
  }

  enum class Ended { kCopied, kUnsent, kAbandoned };
  // The observer told how it ended; its "ready" events back to the pool,
  // unless abandoned: the server may still wait on them, and a new lend
  // recording one again could let it copy before this one's data was ready.
  void release(const Lent& l, Ended ended) {
    if (ended != Ended::kAbandoned) {
      for (const ReadyEvent& r : l.ready) ipc->releaseReady(r.device, r.slot);
    }
    for (uint64_t token : l.observed) {
      if (ended == Ended::kUnsent) {
        observer->cancelled(token);
      } else {
        observer->finished(token, ended == Ended::kCopied);
      }
    }
  }
  // The "ready" event of `stream` in `l`, recorded there now if it is new.
  const ReadyEvent* readyOn(Lent& l, int device, cudaStream_t stream, std::string& why) {
    for (const ReadyEvent& r : l.ready) {
      if (r.stream == stream) return &r;
    }
    ReadyEvent r;
    r.device = device;
    r.stream = stream;
    cudaEvent_t event;
    cudaIpcEventHandle_t handle;
    r.slot = ipc->takeReady(device, event, handle);
    r.handle = toWire(handle);
    l.ready.push_back(r);
    cuda::DeviceScope scope(device);
    const cudaError_t e = cudaEventRecord(event, stream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = cudaWhat("cudaEventRecord", e);
      return nullptr;
    }
    return &l.ready.back();
  }
};

Sender::Sender(LanePairs pairs, std::string peer, std::shared_ptr<DeviceTransferObserver> observer)
    : state_(std::make_unique<State>()) {
  state_->pairs = std::move(pairs);
  state_->peer = std::move(peer);
  state_->observer = std::move(observer);
}

Sender::~Sender() {
  end();
}

bool Sender::carries(const OutgoingMessage& m) const {
  if (m.tensors.empty() || m.streams.size() != m.tensors.size() ||
      m.targets.size() != m.tensors.size() || m.tensors.size() > wire::kMaxLaneTensors) {
    return false;
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const at::Tensor& t = m.tensors[i];
    if (m.streams[i] == nullptr || !t.is_cuda() || t.nbytes() == 0 ||
        !state_->pairs.allows(t.device().index(), m.targets[i])) {
      return false;
    }
  }
  return true;
}

bool Sender::lend(const std::shared_ptr<OutgoingMessage>& m, std::string& handles,
                  uint64_t& handoff, std::string& why) {
  trace::point("lane.lend", m->tensors.size());
  State& s = *state_;
  wire::LaneTensors section;
  section.tensors.reserve(m->tensors.size());
  Lent lent;
  const auto pid = static_cast<int32_t>(::getpid());
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    const at::Tensor& t = m->tensors[i];
    const int device = t.device().index();
    wire::LaneTensor w;
    cuda::ExportedMemory exported;
    const ReadyEvent* ready = nullptr;
    if (s.ipc->exportMemory(t.data_ptr(), device, exported, why)) {
      ready = s.readyOn(lent, device, static_cast<cudaStream_t>(m->streams[i]), why);
    }
    if (ready == nullptr) {
      s.release(lent, State::Ended::kUnsent);
      return false;
    }
    if (s.observer) {
      DeviceTransfer transfer;
      transfer.send = true;
      transfer.peer = s.peer;
      transfer.localDevice = device;
      transfer.remoteDevice = m->targets[i];
      transfer.bytes = t.nbytes();
      transfer.ptr = t.data_ptr();
      transfer.stream = m->streams[i];
      lent.observed.push_back(s.observer->started(transfer));
    }
    w.meta.dtype = static_cast<int8_t>(t.scalar_type());
    w.meta.deviceType = 1;
    w.meta.deviceIndex = static_cast<int8_t>(m->targets[i]);
    w.meta.sizes.assign(t.sizes().begin(), t.sizes().end());
    w.pid = pid;
    w.device = device;
    w.base = exported.base;
    w.bufferId = exported.bufferId;
    w.offset = exported.offset;
    w.length = t.nbytes();
    w.memory = toWire(exported.handle);
    w.ready = ready->handle;
    section.tensors.push_back(std::move(w));
  }
  lent.message = m;
  section.handoff = s.lent.add(lent);  // 0 leaves `lent` as it was
  if (section.handoff == 0) {
    s.release(lent, State::Ended::kUnsent);
    why = "the lane has ended";
    return false;
  }
  handoff = section.handoff;
  handles = wire::encodeLaneTensors(section);
  framesLent.fetch_add(1, std::memory_order_relaxed);
  trace::point("lane.lent", handoff);
  return true;
}

void Sender::unlend(uint64_t handoff) {
  if (auto l = state_->lent.take(handoff)) {
    state_->release(*l, State::Ended::kUnsent);
    framesLent.fetch_sub(1, std::memory_order_relaxed);
  }
}

std::string Sender::copied(uint64_t handoff, const char* data, size_t size) {
  wire::LaneCopied answer;
  std::string why = wire::decodeLaneCopied(data, size, answer);
  if (!why.empty()) return "a malformed copy answer: " + why;
  std::optional<Lent> l = state_->lent.take(handoff);
  if (!l) return "a copy answer for handoff " + std::to_string(handoff) + ", never lent";
  trace::point("lane.copied", handoff);
  cuda::IpcCache& ipc = *state_->ipc;
  for (const ReadyEvent& r : l->ready) {
    cuda::DeviceScope scope(r.device);
    for (const wire::IpcHandle& h : answer.done) {
      cudaEvent_t done = ipc.openEvent(fromWire<cudaIpcEventHandle_t>(h), r.device, why);
      if (done == nullptr) break;
      // The memory is free once the copies are.
      const cudaError_t e = cudaStreamWaitEvent(r.stream, done, 0);
      if (e != cudaSuccess) {
        cudaGetLastError();
        why = cudaWhat("cudaStreamWaitEvent", e);
        break;
      }
    }
    if (!why.empty()) break;
  }
  // Without every wait enqueued the memory must not go back to the allocator:
  // kept (and the lane fails with `why`).
  if (!why.empty()) {
    state_->release(*l, State::Ended::kAbandoned);
    state_->keep(std::move(l->message));
    return why;
  }
  state_->release(*l, State::Ended::kCopied);
  framesCopied.fetch_add(1, std::memory_order_relaxed);
  // The message's tensors were recorded on their send streams (prepareSend):
  // the allocator hands their blocks out again only after the waits above.
  return {};
}

void Sender::end() {
  for (Lent& l : state_->lent.close()) {
    state_->release(l, State::Ended::kAbandoned);
    state_->keep(std::move(l.message));
  }
}

Receiver::Receiver(std::string peer, int64_t pid, std::shared_ptr<DeviceTransferObserver> observer)
    : ipc_(cuda::sharedIpcCache()),
      peer_(std::move(peer)),
      pid_(pid),
      observer_(std::move(observer)) {}
Receiver::~Receiver() = default;

std::string Receiver::receive(const char* data, size_t size, IncomingMessage& in, uint64_t& handoff,
                              std::string& copied) {
  trace::point("lane.receive", size);
  wire::LaneTensors section;
  std::string why = wire::decodeLaneTensors(data, size, section, elementSizeOf);
  if (!why.empty()) return "malformed device handles: " + why;
  const int count = ipc_->deviceCount();
  // The streams the copies ran on, each with its device, for the "done" events.
  std::vector<std::pair<int, cudaStream_t>> streams;
  cuda::DeviceSwitch onDevice;
  for (const wire::LaneTensor& w : section.tensors) {
    const int device = w.meta.deviceIndex;
    if (w.pid != pid_) {
      // Another process's memory: its mappings here are cuda_nvlink's or
      // another lane's, which a stale buffer id would close under them.
      return "a tensor in the memory of pid " + std::to_string(w.pid) + " on the lane of pid " +
             std::to_string(pid_);
    }
    if (device < 0 || device >= count) {
      return "a tensor bound for cuda:" + std::to_string(device) + ", but this worker has " +
             std::to_string(count) + " CUDA device(s)";
    }
    void* stream = nullptr;
    at::Tensor t;
    try {
      stream = cuda::receiveStream(in, device);
      t = cuda::receiveBuffer(device, w.length, w.meta.sizes,
                              static_cast<c10::ScalarType>(w.meta.dtype), stream);
    } catch (const std::exception& e) {  // out of memory, most likely
      return "cannot allocate " + std::to_string(w.length) +
             " bytes on cuda:" + std::to_string(device) + ": " + e.what();
    }
    const auto s = static_cast<cudaStream_t>(stream);
    in.tensors.push_back(t);
    in.streams.push_back(stream);
    in.moveTo.push_back(-1);
    bool sameGpu = false;
    uint64_t mapped = 0;
    cuda::PeerMemory peer{w.pid, w.device, w.base, w.bufferId,
                          fromWire<cudaIpcMemHandle_t>(w.memory)};
    void* base = ipc_->openMemory(peer, device, sameGpu, mapped, why);
    if (base != nullptr && (w.offset > mapped || w.length > mapped - w.offset)) {
      return "a copy of " + std::to_string(w.length) + " bytes at offset " +
             std::to_string(w.offset) + " of a peer's allocation of " + std::to_string(mapped);
    }
    cudaEvent_t ready = base != nullptr
                            ? ipc_->openEvent(fromWire<cudaIpcEventHandle_t>(w.ready), device, why)
                            : nullptr;
    if (ready == nullptr) return why;
    onDevice.to(device);
    uint64_t token = 0;
    if (observer_) {
      DeviceTransfer transfer;
      transfer.send = false;
      transfer.peer = peer_;
      transfer.localDevice = device;
      transfer.remoteDevice = w.device;
      transfer.bytes = w.length;
      transfer.ptr = t.data_ptr();
      transfer.stream = stream;
      token = observer_->started(transfer);  // its start: before the wait, as a channel's recv
    }
    // A GPU two workers share is not sent here (lane_pairs.h): the wait on the
    // GPU holds for it too, only slower.
    cudaStreamWaitEvent(s, ready, 0);
    trace::point("lane.waits", w.length);
    const cudaError_t e = cudaMemcpyAsync(t.data_ptr(), static_cast<const char*>(base) + w.offset,
                                          w.length, cudaMemcpyDeviceToDevice, s);
    trace::point("lane.enqueued", w.length);
    if (observer_) observer_->finished(token, e == cudaSuccess);
    bool seen = false;
    for (const auto& [d, known] : streams) seen = seen || known == s;
    if (!seen) streams.emplace_back(device, s);
  }
  wire::LaneCopied answer;
  for (const auto& [device, s] : streams) {
    cudaEvent_t done;
    cudaIpcEventHandle_t handle;
    ipc_->takeDone(device, s, done, handle);
    onDevice.to(device);
    cudaEventRecord(done, s);
    answer.done.push_back(toWire(handle));
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cudaWhat("the copies", e);
  handoff = section.handoff;
  copied = wire::encodeLaneCopied(answer);
  framesReceived.fetch_add(1, std::memory_order_relaxed);
  tensorsReceived.fetch_add(section.tensors.size(), std::memory_order_relaxed);
  return {};
}

}  // namespace rpcjob::runtime::cuda_lane
