#include "cuda_lane.h"

#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/cuda_error.h"
#include "cuda/cuda_future.h"
#include "cuda/cuda_serialization.h"
#include "cuda/device_scope.h"
#include "cuda/ipc_cache.h"
#include "cuda/receive_spares.h"
#include "handles_wire.h"
#include "handoffs.h"
#include "landing_offers.h"
#include "serialization.h"
#include "trace/trace.h"

namespace rpcjob::runtime::cuda_lane {
namespace {

using cuda::cudaWhat;

std::atomic<uint64_t> framesLent{0};
std::atomic<uint64_t> framesCopied{0};
std::atomic<uint64_t> framesReceived{0};
std::atomic<uint64_t> tensorsReceived{0};
std::atomic<uint64_t> tensorsPushed{0};
std::atomic<uint64_t> tensorsLanded{0};
std::atomic<uint64_t> offersMade{0};
std::atomic<uint64_t> offersReturned{0};
std::atomic<uint64_t> offersGivenBack{0};

// Tensors this large go by landing offers: below it the server's own copy
// costs as little, and offers of every small size would hold memory for
// nothing (the spares' floor, for the same reason).
constexpr uint64_t kMinLandingBytes = cuda::ReceiveSpares::kMinBytes;

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

bool landingHere() {
  static const bool landing = [] {
    const char* env = std::getenv("RPCJOB_LANE_PUSH");
    return enabledHere() && (env == nullptr || std::string(env) != "0");
  }();
  return landing;
}

Counters counters() {
  return {framesLent.load(),      framesCopied.load(),   framesReceived.load(),
          tensorsReceived.load(), tensorsPushed.load(),  tensorsLanded.load(),
          offersMade.load(),      offersReturned.load(), offersGivenBack.load()};
}

// A landing offer the sender holds. `after`: set when a push into it did not
// go (unlend); the next push waits for that one, on the GPU, so that the two
// cannot land out of order.
struct HeldOffer {
  wire::LandingOffer offer;
  cudaEvent_t after = nullptr;
  LandingSize size() const { return {offer.device, offer.length}; }
};

// Whether the push `o.after` follows has run (no event: none to wait for; an
// error: the context is broken, nothing more runs). Polled, never waited on:
// the caller may hold the lane's write lock, which the poller's thread needs.
bool pushDone(const HeldOffer& o) {
  if (o.after == nullptr) return true;
  const cudaError_t e = cudaEventQuery(o.after);
  if (e == cudaErrorNotReady) return false;
  if (e != cudaSuccess) cudaGetLastError();
  return true;
}

// Its event let go (CUDA frees it once it has occurred).
void dropEvent(HeldOffer& o) {
  if (o.after == nullptr) return;
  cudaEventDestroy(o.after);
  cudaGetLastError();
  o.after = nullptr;
}

// The observer's token for a transfer that starts now; 0 without an observer.
uint64_t observeStart(DeviceTransferObserver* observer, bool send, const std::string& peer,
                      int localDevice, int remoteDevice, size_t bytes, void* ptr, void* stream) {
  if (observer == nullptr) return 0;
  DeviceTransfer transfer;
  transfer.send = send;
  transfer.peer = peer;
  transfer.localDevice = localDevice;
  transfer.remoteDevice = remoteDevice;
  transfer.bytes = bytes;
  transfer.ptr = ptr;
  transfer.stream = stream;
  return observer->started(transfer);
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
  std::vector<uint64_t> observed;  // the observer's tokens, one per tensor pulled
  struct Pushed {
    HeldOffer offer;
    int device;
    cudaStream_t stream;
  };
  std::vector<Pushed> pushed;       // offers this frame's tensors were copied into
  std::vector<HeldOffer> returned;  // offers it gives back
};

struct Sender::State {
  LanePairs pairs;
  std::string peer;
  std::shared_ptr<DeviceTransferObserver> observer;
  std::shared_ptr<cuda::IpcCache> ipc = cuda::sharedIpcCache();
  Handoffs<Lent> lent;
  HeldOffers<HeldOffer> offers;
  bool landing = false;               // this client asked for offers
  std::atomic<int64_t> serverPid{0};  // the lane's answer said; 0 before
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
  // A frame that did not go: the offers it pushed into and those it gave
  // back are held again, each pushed one after its copy.
  void restore(Lent& l) {
    for (Lent::Pushed& p : l.pushed) {
      cuda::DeviceScope scope(p.device);
      cudaEvent_t after = nullptr;
      if (cudaEventCreateWithFlags(&after, cudaEventDisableTiming) != cudaSuccess ||
          cudaEventRecord(after, p.stream) != cudaSuccess) {
        cudaGetLastError();
        if (after != nullptr) cudaEventDestroy(after);
        after = nullptr;
        cudaStreamSynchronize(p.stream);  // no event to wait on: the push is done after this
      }
      p.offer.after = after;
      offers.add(p.offer, p.offer.size());
    }
    for (HeldOffer& o : l.returned) offers.add(o, o.size());
    l.pushed.clear();
    l.returned.clear();
  }
  // Copies `t` into the landing offer `o` on `stream` (the push): false with
  // why when the offer cannot be opened or the copy not enqueued; the offer
  // then goes back to the server with the next frame, unused.
  bool push(HeldOffer& o, const at::Tensor& t, int device, cudaStream_t stream, int target,
            std::string& why) {
    cuda::PeerMemory peerMemory{o.offer.pid, o.offer.device, o.offer.base, o.offer.bufferId,
                                fromWire<cudaIpcMemHandle_t>(o.offer.memory)};
    bool sameGpu = false;
    uint64_t mapped = 0;
    void* base = ipc->openMemory(peerMemory, device, sameGpu, mapped, why);
    if (base != nullptr && (o.offer.offset > mapped || o.offer.length > mapped - o.offer.offset)) {
      why = "a landing offer of " + std::to_string(o.offer.length) + " bytes at offset " +
            std::to_string(o.offer.offset) + " of an allocation of " + std::to_string(mapped);
      base = nullptr;
    }
    if (base == nullptr) {
      // Nothing written now; its `after` (a push that did not go) keeps it
      // from going back before that push ran (lend()).
      offers.giveBackUnused(o, o.size());
      return false;
    }
    cuda::DeviceScope scope(device);
    if (o.after != nullptr) cudaStreamWaitEvent(stream, o.after, 0);
    const uint64_t token =
        observeStart(observer.get(), true, peer, device, target, t.nbytes(), t.data_ptr(), stream);
    const cudaError_t e = cudaMemcpyAsync(static_cast<char*>(base) + o.offer.offset, t.data_ptr(),
                                          t.nbytes(), cudaMemcpyDeviceToDevice, stream);
    trace::point("lane.pushed", t.nbytes());
    if (observer) observer->finished(token, e == cudaSuccess);  // its end event follows the copy
    if (e != cudaSuccess) {
      cudaGetLastError();
      why = cudaWhat("cudaMemcpyAsync into a landing offer", e);
      offers.giveBackUnused(o, o.size());  // not enqueued: as above
      return false;
    }
    dropEvent(o);  // this push is on the stream after the earlier one
    return true;
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

Sender::Sender(LanePairs pairs, std::string peer, std::shared_ptr<DeviceTransferObserver> observer,
               bool landing)
    : state_(std::make_unique<State>()) {
  state_->pairs = std::move(pairs);
  state_->peer = std::move(peer);
  state_->observer = std::move(observer);
  state_->landing = landing;
}

void Sender::setServerPid(int64_t pid) {
  state_->serverPid.store(pid, std::memory_order_release);
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
  // What did not go stays as it was: offers held again, events back.
  auto fail = [&] {
    s.restore(lent);
    s.release(lent, State::Ended::kUnsent);
    return false;
  };
  // Offers to give back; one whose earlier push (that did not go) may still
  // run waits for the next frame, so the server never has it back under it.
  for (HeldOffer& o : s.offers.age(wire::kMaxLaneTensors)) {
    if (!pushDone(o)) {
      s.offers.giveBackUnused(o, o.size());
      continue;
    }
    dropEvent(o);
    lent.returned.push_back(o);
  }
  // First the pushes, so that each send stream's "ready" event, recorded
  // below, follows them.
  std::vector<uint64_t> offerOf(m->tensors.size(), 0);
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    const at::Tensor& t = m->tensors[i];
    if (t.nbytes() < kMinLandingBytes) continue;
    std::optional<HeldOffer> o = s.offers.take({m->targets[i], t.nbytes()});
    if (!o) continue;
    const auto stream = static_cast<cudaStream_t>(m->streams[i]);
    if (!s.push(*o, t, t.device().index(), stream, m->targets[i], why)) return fail();
    offerOf[i] = o->offer.id;
    lent.pushed.push_back({*o, t.device().index(), stream});
  }
  const auto pid = static_cast<int32_t>(::getpid());
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    const at::Tensor& t = m->tensors[i];
    const int device = t.device().index();
    wire::LaneTensor w;
    cuda::ExportedMemory exported;
    if (offerOf[i] == 0 && !s.ipc->exportMemory(t.data_ptr(), device, exported, why)) {
      return fail();
    }
    const ReadyEvent* ready =
        s.readyOn(lent, device, static_cast<cudaStream_t>(m->streams[i]), why);
    if (ready == nullptr) return fail();
    if (s.observer && offerOf[i] == 0) {
      lent.observed.push_back(observeStart(s.observer.get(), true, s.peer, device, m->targets[i],
                                           t.nbytes(), t.data_ptr(), m->streams[i]));
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
    w.offer = offerOf[i];
    section.tensors.push_back(std::move(w));
  }
  for (const HeldOffer& o : lent.returned) section.returned.push_back(o.offer.id);
  const size_t pushed = lent.pushed.size();
  lent.message = m;
  section.handoff = s.lent.add(lent);  // 0 leaves `lent` as it was
  if (section.handoff == 0) {
    why = "the lane has ended";
    return fail();
  }
  handoff = section.handoff;
  handles = wire::encodeLaneTensors(section);
  framesLent.fetch_add(1, std::memory_order_relaxed);
  tensorsPushed.fetch_add(pushed, std::memory_order_relaxed);
  offersGivenBack.fetch_add(section.returned.size(), std::memory_order_relaxed);
  trace::point("lane.lent", handoff);
  return true;
}

void Sender::unlend(uint64_t handoff) {
  if (auto l = state_->lent.take(handoff)) {
    tensorsPushed.fetch_sub(l->pushed.size(), std::memory_order_relaxed);
    state_->restore(*l);
    state_->release(*l, State::Ended::kUnsent);
    framesLent.fetch_sub(1, std::memory_order_relaxed);
  }
}

std::string Sender::offered(const char* data, size_t size) {
  if (!state_->landing) return "landing offers, but this client asked for none";
  std::vector<wire::LandingOffer> offers;
  const std::string why = wire::decodeLandingOffers(data, size, offers);
  if (!why.empty()) return "malformed landing offers: " + why;
  const int64_t server = state_->serverPid.load(std::memory_order_acquire);
  for (const wire::LandingOffer& o : offers) {
    // Another process's memory: opening it could close a mapping of that
    // process's that cuda_nvlink or another lane copies from (ipc_cache.h).
    if (o.pid != server) {
      return "a landing offer in the memory of pid " + std::to_string(o.pid) +
             ", not the server's (" + std::to_string(server) + ")";
    }
  }
  trace::point("lane.offered", offers.size());
  for (wire::LandingOffer& o : offers) {
    HeldOffer held{o};
    state_->offers.add(held, held.size());
  }
  return {};
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
  // No wait: the server keeps what was offered on a lane that ended until this
  // process is gone (Receiver's quarantine).
  for (HeldOffer& o : state_->offers.close()) dropEvent(o);
}

// The process's offers left out by lanes that ended (landing_offers.h). Never
// destroyed: at exit its buffers are not handed back to an allocator CUDA may
// have torn down.
Quarantine<c10::DataPtr>& quarantine() {
  static auto* q = new Quarantine<c10::DataPtr>;
  return *q;
}

bool processAlive(int64_t pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
}

struct Receiver::Offers {
  explicit Offers(uint64_t budget) : held(budget) {}
  OfferedBuffers<c10::DataPtr> held;
  std::vector<LandingSize> lastFrame;  // its large tensors, for offers()
};

Receiver::Receiver(std::string peer, int64_t pid, std::shared_ptr<DeviceTransferObserver> observer,
                   bool landing)
    : ipc_(cuda::sharedIpcCache()),
      peer_(std::move(peer)),
      pid_(pid),
      observer_(std::move(observer)) {
  if (landing && landingHere()) {
    offers_ = std::make_unique<Offers>(cuda::receiveSpares().budget());
  }
}
Receiver::~Receiver() {
  // The client may have pushed into offers still out in frames this side
  // never took (after a refusal, or in a ring torn down), which its GPU may
  // not have run yet: their memory stays out of the allocator while it lives.
  if (offers_) quarantine().keep(pid_, offers_->held.close(), processAlive);  // the gone: freed
}

std::string Receiver::receive(const char* data, size_t size, IncomingMessage& in, uint64_t& handoff,
                              std::string& copied) {
  trace::point("lane.receive", size);
  wire::LaneTensors section;
  std::string why = wire::decodeLaneTensors(data, size, section, elementSizeOf);
  if (!why.empty()) return "malformed device handles: " + why;
  if (offers_ == nullptr) {
    for (const wire::LaneTensor& w : section.tensors) {
      if (w.offer != 0) return "a tensor pushed into a landing offer, but none were made";
    }
    if (!section.returned.empty()) return "landing offers given back, but none were made";
  } else {
    for (uint64_t id : section.returned) {
      if (!offers_->held.giveBack(id)) {
        return "landing offer " + std::to_string(id) + " given back, but not one held";
      }
    }
    offersReturned.fetch_add(section.returned.size(), std::memory_order_relaxed);
    offers_->lastFrame.clear();
  }
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
    // Opened first: once an offer is taken, nothing may return before its
    // buffer's stream waits on "ready" (the client's push may still run, and
    // the buffer would go back to the allocator under it).
    cudaEvent_t ready = ipc_->openEvent(fromWire<cudaIpcEventHandle_t>(w.ready), device, why);
    if (ready == nullptr) return why;
    void* stream = nullptr;
    try {
      stream = cuda::receiveStream(in, device);
    } catch (const std::exception& e) {
      return std::string("no receive stream: ") + e.what();
    }
    c10::DataPtr landed;
    if (w.offer != 0) {
      std::optional<c10::DataPtr> b = offers_->held.take(w.offer, {device, w.length}, why);
      if (!b) return why;
      landed = std::move(*b);
    }
    if (offers_ != nullptr && w.length >= kMinLandingBytes) {
      offers_->lastFrame.emplace_back(device, w.length);
    }
    at::Tensor t;
    try {
      t = cuda::receiveBuffer(device, w.length, w.meta.sizes,
                              static_cast<c10::ScalarType>(w.meta.dtype), stream,
                              std::move(landed));
    } catch (const std::exception& e) {               // out of memory, most likely
      if (w.offer != 0) cudaEventSynchronize(ready);  // the push is done before we go on
      return "cannot allocate " + std::to_string(w.length) +
             " bytes on cuda:" + std::to_string(device) + ": " + e.what();
    }
    const auto s = static_cast<cudaStream_t>(stream);
    in.tensors.push_back(t);
    in.streams.push_back(stream);
    in.moveTo.push_back(-1);
    void* base = nullptr;
    if (w.offer == 0) {
      bool sameGpu = false;
      uint64_t mapped = 0;
      cuda::PeerMemory peer{w.pid, w.device, w.base, w.bufferId,
                            fromWire<cudaIpcMemHandle_t>(w.memory)};
      base = ipc_->openMemory(peer, device, sameGpu, mapped, why);
      if (base == nullptr) return why;
      if (w.offset > mapped || w.length > mapped - w.offset) {
        return "a copy of " + std::to_string(w.length) + " bytes at offset " +
               std::to_string(w.offset) + " of a peer's allocation of " + std::to_string(mapped);
      }
    }
    onDevice.to(device);
    // Its start: before the wait, as a channel's recv.
    const uint64_t token = observeStart(observer_.get(), false, peer_, device, w.device, w.length,
                                        t.data_ptr(), stream);
    // A GPU two workers share is not sent here (lane_pairs.h): the wait on the
    // GPU holds for it too, only slower.
    cudaStreamWaitEvent(s, ready, 0);
    trace::point("lane.waits", w.length);
    if (base == nullptr) {  // pushed: the data is here once "ready" occurred
      if (observer_) observer_->finished(token, true);
      tensorsLanded.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
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

std::string Receiver::offers(std::vector<uint64_t>& ids) {
  if (offers_ == nullptr || offers_->lastFrame.empty()) return {};
  const std::vector<LandingSize> wanted = offers_->held.wanted(offers_->lastFrame);
  offers_->lastFrame.clear();
  std::vector<wire::LandingOffer> made;
  for (const LandingSize& size : wanted) {
    c10::DataPtr buffer;
    cuda::ExportedMemory exported;
    std::string why;
    try {
      buffer = cuda::landingBuffer(size.first, size.second);
    } catch (const std::exception&) {
      break;  // out of memory: pulled, as without offers
    }
    if (!ipc_->exportMemory(buffer.get(), size.first, exported, why)) break;
    wire::LandingOffer o;
    o.device = size.first;
    o.pid = static_cast<int32_t>(::getpid());
    o.base = exported.base;
    o.bufferId = exported.bufferId;
    o.offset = exported.offset;
    o.length = size.second;
    o.memory = toWire(exported.handle);
    o.id = offers_->held.add(size, std::move(buffer));
    ids.push_back(o.id);
    made.push_back(o);
  }
  if (made.empty()) return {};
  trace::point("lane.offers", made.size());
  offersMade.fetch_add(made.size(), std::memory_order_relaxed);
  return wire::encodeLandingOffers(made);
}

void Receiver::withdraw(const std::vector<uint64_t>& ids) {
  if (offers_ == nullptr) return;
  size_t n = 0;
  for (uint64_t id : ids) n += offers_->held.giveBack(id) ? 1 : 0;
  offersMade.fetch_sub(n, std::memory_order_relaxed);
}

}  // namespace rpcjob::runtime::cuda_lane
