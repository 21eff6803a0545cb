// The shared-memory lane beside a pipe (lane/): set-up after the handshake,
// routing each message to the lane or the pipe in one order, and the frames'
// way back into the same dispatch as the pipe's messages.
#include <unistd.h>

#include <tensorpipe/tensorpipe.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>

#include "channel_selection.h"
#include "event_clock.h"
#include "lane/lane.h"
#include "lane/poller.h"
#include "release_later.h"
#include "runtime_impl.h"
#include "trace/trace.h"
#if RPCJOB_WITH_CUDA
#include "cuda/cuda_serialization.h"
#include "cuda/nvlink_channel.h"
#include "cuda_lane/cuda_lane.h"
#endif

namespace rpcjob::runtime {
namespace {

std::string firstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string pidNamespace() {
  char buf[256];
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Declines and broken lanes are expected (another pid namespace, no ptrace
// rights): performance degrades, nothing breaks. Said once per process.
void logOnce(const std::string& line) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) std::cerr << line << " (said once)\n";
}

// How long a server's poller spins after a frame with CUDA tensors
// (Poller::keepSpinning): RPCJOB_LANE_DEVICE_SPIN_US, else 4 ms.
std::chrono::microseconds deviceSpin() {
  static const std::chrono::microseconds spin = [] {
    const char* v = std::getenv("RPCJOB_LANE_DEVICE_SPIN_US");
    const long long us = v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : 4000;
    return std::chrono::microseconds(std::clamp<long long>(us, 0, 1000000));  // at most 1 s
  }();
  return spin;
}

// The server's word that it copied the tensors of request frame `handoff`.
wire::Header laneCopiedHeader(uint64_t handoff) {
  wire::Header h;
  h.type = wire::MessageType::kLaneCopied;
  h.id = handoff;
  return h;
}

// The server, on its poller: `h` and `payload` (inline) as one frame on
// `lane`, under `writesMu` (the lane's one producer). Not counted in laneSent:
// no pipe message is ordered after it, so the call's answer (on the pipe)
// never waits for it at the client.
lane::RingProducer::Status sendUnordered(std::mutex& writesMu, lane::Lane& lane,
                                         const wire::Header& h, const std::string& payload,
                                         std::string& why) {
  thread_local std::string frame;
  wire::encodeHeaderInto(h, 4 + payload.size(), frame);
  wire::appendInlinePayload(frame, payload.data(), payload.size());
  std::lock_guard<std::mutex> lock(writesMu);
  return lane.send(frame.data(), frame.size(), &why);
}

// A message the lane may carry: no tensor for a channel, a payload that could
// travel inline (its size against the ring's frames: sendFrameLocked).
bool laneCarries(const OutgoingMessage& m) {
  return m.tensors.empty() && (!m.hasPayload || m.payload.size() <= wire::kMaxInlinePayload);
}

// Which messages a lane frame may carry: requests towards the server, their
// answers back, and the server's word that it copied a request's CUDA tensors.
bool isLaneMessage(wire::MessageType t, bool toServer) {
  if (wire::expectsAnswer(t)) return toServer;
  return !toServer && (t == wire::MessageType::kResponse || t == wire::MessageType::kError ||
                       t == wire::MessageType::kLaneCopied);
}

// Which message an out-of-order frame was, for the error that closes its pipe.
std::string describeFrame(const wire::Header& h) {
  std::string out = "a frame of type " + std::to_string(static_cast<int>(h.type)) + ", id " +
                    std::to_string(h.id);
  if (!h.function.empty()) out += ", function '" + h.function + "'";
  return out;
}

}  // namespace

wire::DeviceDescriptors RuntimeImpl::laneDescriptor() const {
  return {{firstLine("/proc/sys/kernel/random/boot_id"),
           pidNamespace() + ":" + std::to_string(::getpid())}};
}

lane::Poller* RuntimeImpl::lanePoller(std::string& why) {
  std::lock_guard<std::mutex> lock(laneMu_);
  if (closed_) {
    why = "shutting down";
    return nullptr;
  }
  if (!poller_) {
    auto poller = std::make_unique<lane::Poller>(lane::spinFromEnvironment(), why,
                                                 lane::spinFixedByEnvironment());
    if (poller->bellFd() < 0) return nullptr;
    poller_ = std::move(poller);
  }
  return poller_.get();
}

void RuntimeImpl::stopLanes() {
  std::unique_ptr<lane::Poller> poller;
  {
    std::lock_guard<std::mutex> lock(laneMu_);
    poller = std::move(poller_);
  }
  // Waits on the lanes' order end first: a pipe's reader may wait for frames.
  {
    std::lock_guard<std::mutex> lock(serverMu_);
    for (auto& s : serverPipes_) s->writes.order->fail();
  }
  for (auto& peer : peers_) {
    std::lock_guard<std::mutex> lock(peer->mu);
    if (peer->writes) peer->writes->order->fail();
  }
  if (poller) poller->stop();
}

lane::Lane* RuntimeImpl::prepareLane(const std::shared_ptr<lane::Lane>& lane,
                                     const std::shared_ptr<WriteQueue>& writes,
                                     std::function<void(IncomingMessage&)> onMessage,
                                     std::function<void(const std::string&)> onBroken,
                                     std::string& why, DeviceFrames deviceFrames) {
  lane::Poller* poller = lanePoller(why);
  if (poller == nullptr) return nullptr;
  std::shared_ptr<lane::Order> order = writes->order;
  const bool toServer = lane->side() == lane::Lane::Side::kServer;
  auto msg = std::make_shared<IncomingMessage>();  // reused for every frame
  lane->setReceiver(
      [this, msg, order, onMessage = std::move(onMessage), toServer,
       device = std::move(deviceFrames), poller, weakWrites = std::weak_ptr<WriteQueue>(writes),
       thisLane = lane.get(),
       refused = std::make_shared<bool>(false)](const char* data, size_t size, std::string& error) {
        // After a refused frame nothing more is taken from this lane, as
        // nothing more is read from a pipe after a refused message: the caller
        // fails what it sent after it, and must not have it run here as well.
        if (*refused) return lane::Delivery::kBlocked;
        wire::Header& h = msg->header;
        error = wire::decodeHeader(data, size, h);
        if (!error.empty()) return lane::Delivery::kFailed;
        if ((h.type == wire::MessageType::kLaneCopied ||
             h.type == wire::MessageType::kLaneOffers) &&
            !h.hasOrder && !toServer) {
          // Unordered (answerCopied, sendLandingOffers): nothing was stamped behind it.
          if (h.inlinePayload)
            msg->payload.assign(data + h.payloadOffset, data + h.payloadOffset + h.payloadLength);
          onMessage(*msg);
          msg->clear();
          return lane::Delivery::kDelivered;
        }
        if (!h.hasOrder) {
          error = "a frame without its order";
          return lane::Delivery::kFailed;
        }
        if (!isLaneMessage(h.type, toServer)) {
          error = "a message of type " + std::to_string(static_cast<int>(h.type)) + " on the lane";
          return lane::Delivery::kFailed;
        }
        const lane::Delivery d = order->mayDeliver(h.orderBefore, error);
        if (d == lane::Delivery::kFailed) error += " (" + describeFrame(h) + ")";
        if (d != lane::Delivery::kDelivered) return d;
        if (h.inlinePayload)
          msg->payload.assign(data + h.payloadOffset, data + h.payloadOffset + h.payloadLength);
        std::optional<AfterGpuStep> afterStep;  // its releases once the frame is dispatched
        if (h.deviceHandles) {
          afterStep.emplace();
          // Enqueued on this thread, the copies start before the message is
          // dispatched; the server's answer lets the client reuse the memory.
          uint64_t handoff = 0;
          std::string copied;
#if RPCJOB_WITH_CUDA
          if (device.receiver) {
            error = device.receiver->receive(data + h.handlesOffset, h.handlesLength, *msg, handoff,
                                             copied);
          } else {
            error = "CUDA tensors as handles on a lane that does not take them";
          }
#else
          error = "CUDA tensors as handles, but this worker has no CUDA build";
#endif
          if (!error.empty()) {
            error += " (" + describeFrame(h) + ")";
            if (!device.refuse) {
              msg->clear();
              return lane::Delivery::kFailed;
            }
            // As a pipe message this worker cannot take (refuse()): the caller
            // learns why, and closes the pipe, lane and all.
            std::cerr << "rpcjob: worker '" << self().name
                      << "': refused a frame on the shared-memory lane: " << error << "\n";
            device.refuse(h, error);
            error.clear();
            msg->clear();
            *refused = true;  // not dispatched: pipe messages behind it wait, and end
            return lane::Delivery::kDelivered;
          }
          poller->keepSpinning(deviceSpin());
          if (auto writes = weakWrites.lock()) {
            if (!answerCopied(*writes, *thisLane, handoff, std::move(copied), device.answerOrdered,
                              error)) {
              msg->clear();
              return lane::Delivery::kFailed;
            }
          }
#if RPCJOB_WITH_CUDA
          // Before the dispatch, so that a caller waiting for the answer has
          // the offers for its next request by then (a buffer held ahead
          // makes this a few microseconds; the copies are enqueued already).
          sendLandingOffers(weakWrites, *thisLane, *device.receiver);
#endif
        }
        // Its arrival: the counter the poller read after the previous frame, if
        // it did (the frame was taken right after), else read when asked.
        uint64_t ticks = 0;
        const EventTime arrived = options_.observer && lane::counterBeforeFrame(ticks)
                                      ? EventTime(eventClockAt(ticks))
                                      : EventTime();
        msg->arrived = &arrived;
        onMessage(*msg);
#if RPCJOB_WITH_CUDA
        if (h.deviceHandles) cuda::holdReceiveBuffers(*msg);  // as a pipe's read (dispatchRead)
#endif
        msg->clear();
        order->laneDispatched();
        return lane::Delivery::kDelivered;
      },
      [this, order, onBroken = std::move(onBroken)](const std::string& why) {
        order->fail();
        std::cerr << "rpcjob: worker '" << self().name << "': " << why << "\n";
        onBroken(why);
      });
  order->setWake([poller] { poller->wake(); });
  // Weak: the write queue holds the lane, which holds this.
  lane->setPublisher([this, weak = std::weak_ptr<WriteQueue>(writes), l = lane.get()] {
    if (auto w = weak.lock()) {
      std::lock_guard<std::mutex> lock(w->mu);
      l->publishHeld();
    }
    recordServedInTurn();  // their answers are out (or their lane is gone): now, not before
  });
  poller->add(lane);
  return lane.get();
}

bool RuntimeImpl::likelyOnLane(const WriteQueue& writes, const OutgoingMessage& m) {
  return writes.laneUp.load(std::memory_order_relaxed) && laneCarries(m);
}

RuntimeImpl::Routed RuntimeImpl::sendFrameLocked(WriteQueue& writes, std::string& header,
                                                 std::string_view payload, bool hasPayload,
                                                 bool hold, std::string& why,
                                                 std::string_view handles) {
  lane::Lane& l = *writes.lane;
  const size_t size = header.size();
  const size_t handlesBytes = handles.empty() ? 0 : 4 + handles.size();
  if (!l.canSend() || size + wire::kOrderBytes + 4 + payload.size() + handlesBytes > l.maxFrame()) {
    return Routed::kPipe;
  }
  const char flags = header[5];
  wire::appendOrder(header, writes.pipeSent);
  if (hasPayload) wire::appendInlinePayload(header, payload.data(), payload.size());
  if (!handles.empty()) wire::appendDeviceHandles(header, handles.data(), handles.size());
  const lane::RingProducer::Status s =
      l.send(header.data(), header.size(), &why,
             hold ? lane::Lane::Publish::kHeld : lane::Lane::Publish::kNow);
  if (s == lane::RingProducer::Status::kOk) {
    writes.laneSent++;
    return Routed::kLane;
  }
  header.resize(size);  // as encoded: the pipe takes it (a full ring)
  header[5] = flags;
  return s == lane::RingProducer::Status::kBroken ? Routed::kBroken : Routed::kPipe;
}

#if RPCJOB_WITH_CUDA
RuntimeImpl::Routed RuntimeImpl::sendDeviceFrameLocked(
    WriteQueue& writes, const std::shared_ptr<OutgoingMessage>& message, bool hold,
    std::string& why) {
  OutgoingMessage& m = *message;
  constexpr size_t kTypeAt = 3;  // "RJ", version, type
  if (m.header.size() <= kTypeAt ||
      !wire::expectsAnswer(static_cast<wire::MessageType>(m.header[kTypeAt])) ||
      (m.hasPayload && m.payload.size() > wire::kMaxInlinePayload) ||
      !writes.deviceSender->carries(m)) {
    return Routed::kPipe;
  }
  std::string handles;
  uint64_t handoff = 0;
  std::string unlent;
  if (!writes.deviceSender->lend(message, handles, handoff, unlent)) {
    logOnce("rpcjob: worker '" + self().name + "': CUDA tensors go by the pipe: " + unlent);
    return Routed::kPipe;
  }
  if (handles.size() > wire::kMaxDeviceHandles) {  // hundreds of tensors: the pipe's
    writes.deviceSender->unlend(handoff);
    return Routed::kPipe;
  }
  const Routed r = sendFrameLocked(writes, m.header, {m.payload.data(), m.payload.size()},
                                   m.hasPayload, hold, why, handles);
  if (r != Routed::kLane) writes.deviceSender->unlend(handoff);
  return r;
}
#endif

RuntimeImpl::Routed RuntimeImpl::routeLocked(WriteQueue& writes,
                                             const std::shared_ptr<OutgoingMessage>& message,
                                             std::string& why, bool hold) {
  OutgoingMessage& m = *message;
#if RPCJOB_WITH_CUDA
  if (writes.deviceSender && !m.tensors.empty()) {
    const Routed r = sendDeviceFrameLocked(writes, message, hold, why);
    if (r != Routed::kPipe) return r;
  }
#endif
  if (laneCarries(m)) {
    const Routed r = sendFrameLocked(writes, m.header, {m.payload.data(), m.payload.size()},
                                     m.hasPayload, hold, why);
    if (r != Routed::kPipe) return r;
  }
  wire::appendOrder(m.header, writes.laneSent);
  writes.pipeSent++;
  return Routed::kPipe;
}

RuntimeImpl::LaneFrameLoan::LaneFrameLoan(bool wanted) {
  thread_local LaneFrame frame;
  if (!wanted || frame.lent) return;
  frame.lent = true;
  frame_ = &frame;
}

RuntimeImpl::LaneFrameLoan::~LaneFrameLoan() {
  if (frame_ != nullptr) frame_->lent = false;
}

bool RuntimeImpl::sendOnLane(WriteQueue& writes, LaneFrame& frame) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(writes.mu);
    if (!writes.lane) return false;
    switch (sendFrameLocked(writes, frame.header, {frame.payload.data(), frame.payload.size()},
                            /*hasPayload=*/true, /*hold=*/false, why)) {
      case Routed::kLane:
        return true;
      case Routed::kPipe:
        return false;  // closed, too large or full: the pipe takes it
      case Routed::kBroken:
        break;
    }
  }
  laneBroken(writes, why);
  return true;
}

std::shared_ptr<OutgoingMessage> RuntimeImpl::laneFrameMessage(std::string_view header,
                                                               std::string_view payload) {
  auto out = std::make_shared<OutgoingMessage>();
  out->header.reserve(header.size() + wire::kOrderBytes + 4 + payload.size());
  out->header.assign(header.data(), header.size());
  out->payload.assign(payload.begin(), payload.end());
  out->hasPayload = true;
  return out;
}

void RuntimeImpl::writeFrames(HeldFrames held) {
  thread_local std::string frame;  // one frame at a time: its header, order and payload
  std::vector<std::shared_ptr<OutgoingMessage>> rest;
  std::string broken;
  WriteQueue& writes = *held.writes;
  {
    std::lock_guard<std::mutex> lock(writes.mu);
    const char* at = held.bytes.data();
    const char* const end = at + held.bytes.size();
    const auto next = [&] {
      uint32_t size;
      std::memcpy(&size, at, sizeof(size));
      std::string_view bytes(at + sizeof(size), size);
      at += sizeof(size) + size;
      return bytes;
    };
    while (at < end) {
      const std::string_view header = next();
      const std::string_view payload = next();
      if (!broken.empty()) continue;  // dropped: the pipe fails, and its calls
      if (rest.empty() && writes.lane) {
        frame.assign(header.data(), header.size());
        std::string why;
        const Routed r = sendFrameLocked(writes, frame, payload, /*hasPayload=*/true,
                                         /*hold=*/true, why);
        if (r == Routed::kLane) continue;
        if (r == Routed::kBroken) {
          broken = why;
          continue;
        }
      }
      rest.push_back(laneFrameMessage(header, payload));
    }
    if (writes.lane) writes.lane->publishHeld();
  }
  if (!broken.empty()) {
    laneBroken(writes, broken);
    return;
  }
  if (!rest.empty()) enqueueWrites(held.pipe, writes, std::move(rest), held.writes);
}

void RuntimeImpl::laneBroken(WriteQueue& writes, const std::string& why) {
  std::cerr << "rpcjob: worker '" << self().name
            << "': the peer broke the shared-memory lane: " << why << "\n";
  closeLane(writes);
  if (writes.onError) writes.onError("the peer broke the shared-memory lane: " + why);
}

void RuntimeImpl::closeLane(WriteQueue& writes) {
  std::shared_ptr<lane::Lane> lane, offered;
  std::shared_ptr<cuda_lane::Sender> sender;
  {
    std::lock_guard<std::mutex> lock(writes.mu);
    lane = writes.lane;  // kept: later messages stay ordered (they fail anyway)
    writes.laneUp.store(false, std::memory_order_relaxed);
    offered = std::move(writes.offered);
    sender = std::move(writes.deviceSender);
    writes.offeredSender.reset();
  }
  writes.order->fail();
  if (lane) lane->close();
  if (offered) offered->close();
#if RPCJOB_WITH_CUDA
  if (sender) sender->end();  // what the server has not answered for: the pipe fails it
#endif
}

std::shared_ptr<cuda_lane::Sender> RuntimeImpl::deviceSenderFor(
    [[maybe_unused]] int rank, [[maybe_unused]] const wire::ChannelDescriptors& remote) {
#if RPCJOB_WITH_CUDA
  if (!cuda_lane::enabledHere()) return nullptr;
  const auto nvlinkOf = [](const wire::ChannelDescriptors& all) -> const wire::DeviceDescriptors* {
    for (const auto& [name, devices] : all) {
      if (name == cuda::kNvlinkChannel) return &devices;
    }
    return nullptr;
  };
  const wire::ChannelDescriptors ours = localDescriptors(registry_);
  const wire::DeviceDescriptors* local = nvlinkOf(ours);
  const wire::DeviceDescriptors* theirs = nvlinkOf(remote);
  if (local == nullptr || theirs == nullptr) return nullptr;
  std::vector<cuda_lane::PairChoice> choices;
  {
    std::lock_guard<std::mutex> lock(peers_[rank]->mu);
    for (const ChannelChoice& c : peers_[rank]->choices) {
      choices.push_back({c.localDevice, c.remoteDevice, c.channel});
    }
  }
  cuda_lane::LanePairs pairs = cuda_lane::LanePairs::from(choices, *local, *theirs);
  if (pairs.empty()) return nullptr;
  return std::make_shared<cuda_lane::Sender>(std::move(pairs), workers_[rank].name,
                                             options_.hooks.deviceTransfers,
                                             cuda_lane::landingHere());
#else
  return nullptr;
#endif
}

bool RuntimeImpl::answerCopied(WriteQueue& writes, lane::Lane& lane, uint64_t handoff,
                               std::string copied,
                               const std::function<void(uint64_t, std::string)>& ordered,
                               std::string& why) {
  switch (sendUnordered(writes.mu, lane, laneCopiedHeader(handoff), copied, why)) {
    case lane::RingProducer::Status::kOk:
    case lane::RingProducer::Status::kClosed:  // the pipe is going: nothing waits for it
      return true;
    case lane::RingProducer::Status::kFull:
    case lane::RingProducer::Status::kTooLarge:
      ordered(handoff, std::move(copied));  // the ordered way, which may take the pipe
      return true;
    case lane::RingProducer::Status::kBroken:
      break;
  }
  why = "cannot answer on the lane (" + why + ")";
  return false;
}

#if RPCJOB_WITH_CUDA
void RuntimeImpl::sendLandingOffers(const std::weak_ptr<WriteQueue>& weakWrites, lane::Lane& lane,
                                    cuda_lane::Receiver& receiver) {
  std::vector<uint64_t> ids;
  const std::string offers = receiver.offers(ids);
  if (offers.empty()) return;
  lane::RingProducer::Status sent = lane::RingProducer::Status::kClosed;
  if (auto writes = weakWrites.lock()) {
    wire::Header h;
    h.type = wire::MessageType::kLaneOffers;
    std::string why;
    sent = sendUnordered(writes->mu, lane, h, offers, why);
  }
  // Offers are optional: ones the client never learns of go back at once.
  if (sent != lane::RingProducer::Status::kOk) receiver.withdraw(ids);
}
#endif

RuntimeImpl::DeviceFrames RuntimeImpl::deviceFramesFor(const std::shared_ptr<ServerPipe>& server,
                                                       [[maybe_unused]] bool takes,
                                                       [[maybe_unused]] int64_t clientPid,
                                                       [[maybe_unused]] bool landing) {
  DeviceFrames frames;
#if RPCJOB_WITH_CUDA
  if (takes) {
    frames.receiver = std::make_shared<cuda_lane::Receiver>(
        callerOf(server->callerRank).name, clientPid, options_.hooks.deviceTransfers, landing);
    frames.answerOrdered = copiedAnswer(server);
  }
#endif
  // Weak: the pipe holds the lane, which holds this.
  frames.refuse = [this, weak = std::weak_ptr<ServerPipe>(server)](const wire::Header& h,
                                                                   const std::string& why) {
    if (auto s = weak.lock()) refuse(s, h, why);
  };
  return frames;
}

std::function<void(uint64_t, std::string)> RuntimeImpl::copiedAnswer(
    const std::shared_ptr<ServerPipe>& server) {
  // Weak: the pipe holds the lane, which holds this.
  return [this, weak = std::weak_ptr<ServerPipe>(server)](uint64_t handoff, std::string copied) {
    if (auto s = weak.lock())
      writeServer(s, makeRawMessage(laneCopiedHeader(handoff), std::move(copied)));
  };
}

#if RPCJOB_WITH_CUDA
bool RuntimeImpl::currentDeviceSender(int rank, uint64_t generation,
                                      std::shared_ptr<cuda_lane::Sender>& sender) {
  std::shared_ptr<tensorpipe::Pipe> pipe;
  std::shared_ptr<WriteQueue> writes;
  if (!currentClientPipe(rank, generation, pipe, writes)) return false;
  std::lock_guard<std::mutex> lock(writes->mu);
  sender = writes->deviceSender;
  return true;
}
#endif

void RuntimeImpl::onLaneCopied(int rank, uint64_t generation,
                               [[maybe_unused]] IncomingMessage& msg) {
  std::string why = "a copy answer, but no CUDA tensors were lent to it";
#if RPCJOB_WITH_CUDA
  std::shared_ptr<cuda_lane::Sender> sender;
  if (!currentDeviceSender(rank, generation, sender)) return;
  if (sender) why = sender->copied(msg.header.id, msg.payload.data(), msg.payload.size());
  if (why.empty()) return;
#endif
  failPeer(rank, generation, "worker '" + workers_[rank].name + "' sent " + why);
}

void RuntimeImpl::onLaneOffers(int rank, uint64_t generation,
                               [[maybe_unused]] IncomingMessage& msg) {
  std::string why = "landing offers, but no CUDA tensors go to it on the lane";
#if RPCJOB_WITH_CUDA
  std::shared_ptr<cuda_lane::Sender> sender;
  if (!currentDeviceSender(rank, generation, sender)) return;
  if (sender) why = sender->offered(msg.payload.data(), msg.payload.size());
  if (why.empty()) return;
#endif
  failPeer(rank, generation, "worker '" + workers_[rank].name + "' sent " + why);
}

void RuntimeImpl::offerLane(int rank, uint64_t generation, const wire::ChannelDescriptors& remote) {
  if (!options_.sharedMemoryLane) return;
  const wire::DeviceDescriptors* theirs = nullptr;
  for (const auto& [name, devices] : remote) {
    if (name == wire::kLaneDescriptor) theirs = &devices;
  }
  if (theirs == nullptr || theirs->size() != 1) return;  // an older peer, or lanes off there
  const auto ours = laneDescriptor();
  const std::string& where = (*theirs)[0].second;
  const size_t colon = where.rfind(':');
  if ((*theirs)[0].first != ours[0].first || colon == std::string::npos ||
      where.substr(0, colon) != ours[0].second.substr(0, ours[0].second.rfind(':')) ||
      ::access(("/proc/" + where.substr(colon + 1)).c_str(), F_OK) != 0) {
    return;  // another host or pid namespace: the pipe alone
  }
  std::shared_ptr<tensorpipe::Pipe> pipe;
  std::shared_ptr<WriteQueue> writes;
  if (!currentClientPipe(rank, generation, pipe, writes)) return;
  std::string why;
  std::shared_ptr<lane::Lane> lane = lane::Lane::create(lane::kDefaultCapacity, why);
  lane::Lane* prepared =
      lane ? prepareLane(
                 lane, writes,
                 [this, rank, generation](IncomingMessage& m) {
                   onClientMessage(rank, generation, m);
                 },
                 [this, rank, generation](const std::string& w) { failPeer(rank, generation, w); },
                 why)
           : nullptr;
  if (prepared == nullptr) {
    lane::countLaneDeclined();
    logOnce("rpcjob: worker '" + self().name + "': no shared-memory lane to '" +
            workers_[rank].name + "': " + why);
    return;
  }
  lane::LaneOffer offer = lane->offer();
  {
    std::string unused;
    lane::Poller* poller = lanePoller(unused);
    if (poller == nullptr) return;
    offer.bellFd = poller->bellFd();
    offer.bellToken = poller->bellToken();
  }
  std::shared_ptr<cuda_lane::Sender> sender = deviceSenderFor(rank, remote);
#if RPCJOB_WITH_CUDA
  offer.landing = sender != nullptr && cuda_lane::landingHere();
#endif
  {
    std::lock_guard<std::mutex> lock(writes->mu);
    writes->offered = lane;
    writes->offeredSender = std::move(sender);
  }
  wire::Header h;
  h.type = wire::MessageType::kLaneOffer;
  enqueueWrite(pipe, *writes, makeRawMessage(h, lane::encodeOffer(offer)), writes);
}

bool RuntimeImpl::currentClientPipe(int rank, uint64_t generation,
                                    std::shared_ptr<tensorpipe::Pipe>& pipe,
                                    std::shared_ptr<WriteQueue>& writes) {
  Peer& peer = *peers_[rank];
  std::lock_guard<std::mutex> lock(peer.mu);
  if (peer.generation != generation || !peer.pipe) return false;
  pipe = peer.pipe;
  writes = peer.writes;
  return true;
}

void RuntimeImpl::onLaneReply(int rank, uint64_t generation, IncomingMessage& msg) {
  std::shared_ptr<tensorpipe::Pipe> pipe;
  std::shared_ptr<WriteQueue> writes;
  if (!currentClientPipe(rank, generation, pipe, writes)) return;
  std::shared_ptr<lane::Lane> lane;
  {
    std::lock_guard<std::mutex> lock(writes->mu);
    lane = std::move(writes->offered);
  }
  if (!lane) return;  // none offered: a confused peer; nothing to do
  std::string why = msg.header.error;
  lane::LaneOffer bell;
  std::unique_ptr<lane::SharedFile> bellFile;
  if (why.empty()) why = lane::decodeOffer(msg.payload.data(), msg.payload.size(), bell);
  if (why.empty()) {
    bellFile =
        lane::SharedFile::openPeer(bell.pid, bell.bellFd, lane::bellName(bell.bellToken), 4096,
                                   "the lane bell of pid " + std::to_string(bell.pid), why);
  }
  if (!bellFile) {
    // The server may send on the lane anyway (it accepted): our poller keeps
    // reading it; only our requests stay on the pipe.
    if (!msg.header.error.empty()) lane->close();
    lane::countLaneDeclined();
    logOnce("rpcjob: worker '" + self().name + "': worker '" + workers_[rank].name +
            "' declined a shared-memory lane: " + why);
    return;
  }
  lane->setPeerBell(std::move(bellFile));
  lane::countLaneUp();
  {
    std::lock_guard<std::mutex> lock(writes->mu);
    if (bell.deviceTensors) {
#if RPCJOB_WITH_CUDA
      if (writes->offeredSender) writes->offeredSender->setServerPid(bell.pid);
#endif
      writes->deviceSender = std::move(writes->offeredSender);
    }
    writes->offeredSender.reset();
  }
  wire::Header h;
  h.type = wire::MessageType::kLaneStart;
  enqueueWrite(pipe, *writes, makeMessage(h, nullptr), writes, lane);
}

void RuntimeImpl::onLaneOffer(const std::shared_ptr<ServerPipe>& server, IncomingMessage& msg) {
  std::string why;
  lane::LaneOffer offer;
  std::shared_ptr<lane::Lane> lane;
  std::unique_ptr<lane::SharedFile> bellFile;
  if (!options_.sharedMemoryLane) why = "shared-memory lanes are off here (RPCJOB_LANE=0)";
  if (why.empty()) why = lane::decodeOffer(msg.payload.data(), msg.payload.size(), offer);
  if (why.empty()) lane = lane::Lane::open(offer, why);
  if (lane) {
    bellFile =
        lane::SharedFile::openPeer(offer.pid, offer.bellFd, lane::bellName(offer.bellToken), 4096,
                                   "the lane bell of pid " + std::to_string(offer.pid), why);
  }
  lane::Poller* poller = nullptr;
#if RPCJOB_WITH_CUDA
  const bool deviceTensors = cuda_lane::enabledHere();
#else
  const bool deviceTensors = false;
#endif
  if (bellFile) {
    lane->setPeerBell(std::move(bellFile));
    if (prepareLane(
            // The server pipe's queue, sharing the ServerPipe's lifetime (an alias).
            lane, std::shared_ptr<WriteQueue>(server, &server->writes),
            // Weak: the pipe holds the lane, which holds these.
            [this, weak = std::weak_ptr<ServerPipe>(server)](IncomingMessage& m) {
              if (auto server = weak.lock()) onServerMessage(server, m);
            },
            [weak = std::weak_ptr<ServerPipe>(server)](const std::string&) {
              if (auto server = weak.lock()) server->pipe->close();
            },
            why, deviceFramesFor(server, deviceTensors, offer.pid, offer.landing)) != nullptr) {
      poller = lanePoller(why);
    }
  }
  wire::Header reply;
  reply.type = wire::MessageType::kLaneReply;
  if (poller == nullptr) {
    if (lane) lane->close();
    lane::countLaneDeclined();
    logOnce("rpcjob: worker '" + self().name + "': declined a shared-memory lane from '" +
            callerOf(server->callerRank).name + "': " + why);
    reply.error = why.empty() ? "no lane" : why;
    writeServer(server, makeMessage(reply, nullptr));
    return;
  }
  lane::LaneOffer ours;
  ours.deviceTensors = deviceTensors;
  ours.pid = ::getpid();
  ours.bellFd = poller->bellFd();
  ours.bellToken = poller->bellToken();
  lane::countLaneUp();
  enqueueWrite(server->pipe, server->writes, makeRawMessage(reply, lane::encodeOffer(ours)), server,
               lane);
}

}  // namespace rpcjob::runtime
