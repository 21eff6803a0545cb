// Runtime set-up, pipes and the read loop.
#include "rpcjob/runtime/runtime.h"

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <c10/util/Exception.h>
#include <tensorpipe/tensorpipe.h>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "autograd/container.h"
#if RPCJOB_WITH_CUDA
#include "cuda/cuda_serialization.h"
#endif
#include "call_batch_state.h"
#include "channel_selection.h"
#include "lane/lane.h"
#include "lane/poller.h"
#include "memory_limit.h"
#include "objects/objects.h"
#include "release_later.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/runtime/shared_host.h"
#include "runtime_impl.h"
#include "shutdown.h"
#include "startup/fd_limit.h"
#include "startup/leader_barrier.h"
#include "startup/start_plan.h"
#include "trace/trace.h"

namespace rpcjob::runtime {
namespace {

// How often a start-up still redialling one peer says so.
constexpr auto kReportRedials = std::chrono::seconds(5);

std::pair<std::string, std::string> splitHostPort(const std::string& address) {
  auto colon = address.rfind(':');
  return {address.substr(0, colon), address.substr(colon + 1)};
}

// TensorPipe's uv transport takes IP addresses; the assignment may hold DNS names
// (a headless Service's pod names), so resolve them once here.
std::string resolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0 || result == nullptr) return host;
  char buffer[NI_MAXHOST];
  std::string ip = host;
  if (getnameinfo(result->ai_addr, result->ai_addrlen, buffer, sizeof(buffer), nullptr, 0,
                  NI_NUMERICHOST) == 0) {
    ip = buffer;
  }
  freeaddrinfo(result);
  return ip;
}

// TensorPipe's uv listener asserts on its loop thread (the process aborts) when
// it cannot bind, a port taken by another process for one. Bind first as libuv
// does (SO_REUSEADDR), so that start() throws instead; "" when the port is free
// or when the address is not one we can judge (TensorPipe then decides).
std::string listenPortProblem(const std::string& host, const std::string& port) {
  if (port.empty() || port == "0") return "";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &result) != 0 || result == nullptr) {
    return "";
  }
  std::string problem;
  int fd = ::socket(result->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, result->ai_addr, result->ai_addrlen) != 0) problem = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(result);
  return problem;
}

RpcError connectionError(const std::string& peer, const std::string& why) {
  return RpcError(ErrorCode::kConnection, peer,
                  "connection to worker '" + peer + "' failed: " + why);
}

// A peer's death must fail calls, not end this process: TensorPipe's socket
// writes to a dead peer raise SIGPIPE, whose default action kills. A handler
// the application installed is left alone.
void ignoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
}

}  // namespace

RuntimeImpl::RuntimeImpl(Runtime& owner, Assignment assignment, const std::string& name,
                         RuntimeOptions options)
    : owner_(owner), assignment_(std::move(assignment)), options_(std::move(options)) {
  validateAssignment(assignment_);
  for (const auto& w : assignment_.workers) {
    rankByName_[w.name] = w.rank;
    workers_.push_back({w.name, w.rank});
  }
  auto it = rankByName_.find(name);
  if (it == rankByName_.end()) {
    throw RpcError(ErrorCode::kInvalidArgument, name,
                   "worker '" + name + "' is not in the assignment");
  }
  selfRank_ = it->second;
  failedPipes_.reset(new FailedPipe[workers_.size()]);
  unanswered_.resize(workers_.size());
  if (options_.deviceMaps.empty()) options_.deviceMaps = deviceMapsOf(assignment_, name);
  maxMessageBytes_ = options_.maxMessageBytes > 0 ? options_.maxMessageBytes : memoryLimitBytes();
  pool_ = std::make_shared<ThreadPool>(options_.poolThreads);
  readHandoff_ = std::make_unique<ThreadPool>(1);
  rrefs_ = std::make_unique<RRefContext>(pool_, selfRank_, options_.defaultTimeout);
  autograd_ = std::make_unique<autograd::Container>(*this);
  shutdown_ = std::make_unique<ShutdownCoordinator>(*this);
  startBarrier_ = std::make_unique<startup::LeaderBarrier>(*this);
  registerBuiltins();
  functions_[kBuiltinStartJoin] = {nullptr,
                                   [this](const CallInfo& info, std::vector<c10::IValue> args) {
                                     return startBarrier_->join(info.caller.rank, std::move(args));
                                   },
                                   FunctionOptions{true}};
  objects::registerBuiltins(*this);
}

RuntimeImpl::~RuntimeImpl() {
  shutdown(ShutdownMode::kImmediate, std::chrono::milliseconds(0));
}

int RuntimeImpl::rankOf(const std::string& name) const {
  auto it = rankByName_.find(name);
  if (it == rankByName_.end()) {
    throw RpcError(ErrorCode::kInvalidArgument, name, "unknown worker '" + name + "'");
  }
  return it->second;
}

void RuntimeImpl::registerFunction(const std::string& name, Function fn, AsyncFunction async,
                                   FunctionOptions options) {
  if (started_) throw std::logic_error("registerFunction after start(): " + name);
  functions_[name] = Registered{std::move(fn), std::move(async), options};
}

void RuntimeImpl::start() {
  if (started_.exchange(true)) throw std::logic_error("start() called twice");
  ignoreSigpipeUnlessHandled();
  // Calibrates the event clock's counter now (once per process, ~2 ms), not
  // on the first call that reads it for its deadline.
  (void)readEventClock();
  const int world = static_cast<int>(workers_.size());
  const StartPipes mode = startup::resolve(options_.startPipes, world, options_.fullMeshMaxWorkers);
  startup::reserveFdsForStart(self().name, mode, world, selfRank_);
  if (options_.sharedHostAllocator) useSharedHostAllocator();
  startGate();
#if RPCJOB_WITH_CUDA
  {
    std::vector<std::string> names;
    for (const auto& w : workers_) names.push_back(w.name);
    deviceMaps_.init(self().name, names, options_.deviceMaps, cuda::deviceCount());
  }
#endif
  auto [host, port] = splitHostPort(assignment_.workers[selfRank_].address);
  std::string listenHost = options_.listenHost.empty() ? resolveHost(host) : options_.listenHost;
  context_ = std::make_shared<tensorpipe::Context>(tensorpipe::ContextOptions().name(self().name));
  registry_ = registerTensorpipeContexts(*context_, options_.transports, options_.channels,
                                         listenHost, options_.mptLanes,
                                         options_.hooks.wrapTransport, options_.hooks.wrapChannel);
  wire::ChannelDescriptors descriptors = localDescriptors(registry_);
#if RPCJOB_WITH_CUDA
  deviceMaps_.appendHandshake(descriptors);  // device count and maps, for the peers' checks
#endif
  if (options_.sharedMemoryLane) descriptors.push_back({wire::kLaneDescriptor, laneDescriptor()});
  descriptorsBlob_ = wire::encodeChannelDescriptors(descriptors);
  // The listener must listen on every transport: a pipe first connects over uv
  // and TensorPipe then moves it to the best transport the listener offers.
  std::vector<std::string> urls;
  for (const auto& t : registry_.transports) {
    if (t.name == "uv") {
      std::string problem = listenPortProblem(listenHost, port);
      if (!problem.empty()) {
        throw RpcError(ErrorCode::kConnection, self().name,
                       "cannot listen on " + listenHost + ":" + port + ": " + problem);
      }
      urls.push_back("uv://" + listenHost + ":" + port);
    } else if (t.name == "shm") {
      urls.push_back("shm://");
    } else if (t.name == "ibv") {
      urls.push_back("ibv://" + listenHost);
    }
  }
  listenUrls_ = urls;
  listenHost_ = listenHost;
  listenPort_ = port;
  {
    std::lock_guard<std::mutex> lock(listenerMu_);
    listener_ = context_->listen(urls);
  }
  for (const auto& w : assignment_.workers) {
    auto peer = std::make_unique<Peer>();
    peer->info = workers_[w.rank];
    auto [peerHost, peerPort] = splitHostPort(w.address);
    peer->url = "uv://" + resolveHost(peerHost) + ":" + peerPort;
    peers_.push_back(std::move(peer));
  }
  timeoutThread_ = std::thread([this] { timeoutLoop(); });
  acceptLoop();
  const auto deadline = Clock::now() + options_.startTimeout;
  if (mode == StartPipes::kLazy) return;
  if (mode == StartPipes::kLeaderBarrier) {
    int64_t ownDevices = 0;
#if RPCJOB_WITH_CUDA
    ownDevices = cuda::deviceCount();
#endif
    [[maybe_unused]] const std::vector<int64_t> devices = startBarrier_->run(deadline, ownDevices);
#if RPCJOB_WITH_CUDA
    // What the full mesh's handshakes check, before any pipe to the peer opens.
    for (const auto& w : workers_) {
      deviceMaps_.onPeerDeviceCount(w.name, static_cast<int>(devices[w.rank]));
    }
#endif
  } else {
    connectEveryPeer(deadline);
  }
#if RPCJOB_WITH_CUDA
  for (const auto& w : workers_) {
    auto targets = deviceMaps_.forRequest(w.name);
    if (!targets->error.empty())
      throw RpcError(ErrorCode::kInvalidArgument, w.name, targets->error);
  }
#endif
}

void RuntimeImpl::connectEveryPeer(Clock::time_point deadline) {
  // Connect to everyone at once, then wait for every handshake, retrying peers
  // that are not listening yet (workers start in any order).
  for (size_t r = 0; r < peers_.size(); ++r) {
    uint64_t generation;
    pipeTo(static_cast<int>(r), generation);
  }
  for (size_t r = 0; r < peers_.size(); ++r) {
    std::string error;
    const auto since = Clock::now();
    auto nextReport = since + kReportRedials;
    int attempts = 1;
    while (!waitHandshake(static_cast<int>(r), deadline, error)) {
      const auto now = Clock::now();
      if (now >= deadline) throw connectionError(workers_[r].name, error);
      if (now >= nextReport) {
        // A start-up that waits on one peer for long says on whom and why, while
        // it waits: the start timeout's error comes only at the end.
        std::cerr << "rpcjob: worker '" << self().name << "': still connecting to '"
                  << workers_[r].name << "' after "
                  << std::chrono::duration_cast<std::chrono::seconds>(now - since).count() << " s ("
                  << attempts << " attempts): " << error << "\n";
        nextReport = now + kReportRedials;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // back off, then redial
      uint64_t generation;
      pipeTo(static_cast<int>(r), generation);
      ++attempts;
    }
  }
}

void RuntimeImpl::acceptLoop() {
  std::shared_ptr<tensorpipe::Listener> listener;
  {
    std::lock_guard<std::mutex> lock(listenerMu_);
    listener = listener_;
  }
  listener->accept([this](const tensorpipe::Error& error, std::shared_ptr<tensorpipe::Pipe> pipe) {
    if (error) {
      if (!closed_) relisten(error.what());
      return;
    }
    onAccepted(std::move(pipe));
    acceptLoop();
  });
}

void RuntimeImpl::relisten(const std::string& why) {
  // TensorPipe's listener closes for good on an error of any connection that
  // has not sent its hello yet (a peer that gave up mid-connect, as dozens of
  // peers dialling one worker at once do): the worker would stay deaf, and
  // every peer dialling it would fail with ECONNREFUSED. Listen again, once
  // TensorPipe has let go of the port (off its loop thread).
  std::cerr << "rpcjob: worker '" << self().name << "': the listener failed (" << why
            << "); listening again on port " << listenPort_ << "\n";
  pool_->submit([this, weak = weakSelf_] {
    auto alive = weak.lock();
    if (!alive) return;
    for (int attempt = 0; attempt < 500 && !closed_; ++attempt) {
      if (listenPortProblem(listenHost_, listenPort_).empty()) {
        {
          std::lock_guard<std::mutex> lock(listenerMu_);
          if (closed_) return;
          listener_ = context_->listen(listenUrls_);
        }
        acceptLoop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!closed_) {
      std::cerr << "rpcjob: worker '" << self().name << "': cannot listen again on port "
                << listenPort_ << ": " << listenPortProblem(listenHost_, listenPort_) << "\n";
    }
  });
}

void RuntimeImpl::onAccepted(std::shared_ptr<tensorpipe::Pipe> pipe) {
  if (gate_) {  // nothing is read for the runtime until the peer proved itself
    auto refused = handshakeRefused(pipe->getRemoteName(), nullptr);
    gate_->admitServer(
        pipe, [this, pipe] { serveAdmitted(pipe); }, std::move(refused));
    return;
  }
  serveAdmitted(std::move(pipe));
}

void RuntimeImpl::serveAdmitted(std::shared_ptr<tensorpipe::Pipe> pipe) {
  auto server = std::make_shared<ServerPipe>();
  server->pipe = pipe;
  auto it = rankByName_.find(pipe->getRemoteName());
  server->callerRank = it == rankByName_.end() ? -1 : it->second;
  {
    std::lock_guard<std::mutex> lock(serverMu_);
    serverPipes_.push_back(server);
  }
  readLoop(
      pipe, [this, server](IncomingMessage& msg) { onServerMessage(server, msg); },
      [this, server](const std::string& why, const wire::Header* refused) {
        if (server->callerRank >= 0) shutdown_->forget(server->callerRank);
        closeLane(server->writes);
        if (refused != nullptr && wire::expectsAnswer(refused->type)) {
          refuse(server, *refused, why);
        } else {
          server->pipe->close();
        }
        std::lock_guard<std::mutex> lock(serverMu_);
        for (auto it = serverPipes_.begin(); it != serverPipes_.end(); ++it) {
          if (*it == server) {
            serverPipes_.erase(it);
            break;
          }
        }
      },
      server, server->writes.order);
}

void RuntimeImpl::readLoop(std::shared_ptr<tensorpipe::Pipe> pipe,
                           std::function<void(IncomingMessage&)> onMessage, ReadErrorFn onError,
                           std::shared_ptr<ServerPipe> server, std::shared_ptr<lane::Order> order) {
  auto reader = std::make_shared<PipeReader>();
  reader->order = std::move(order);
  reader->pipe = std::move(pipe);
  reader->onMessage = std::move(onMessage);
  reader->onError = std::move(onError);
  reader->server = std::move(server);
  readNext(std::move(reader));
}

void RuntimeImpl::readNext(std::shared_ptr<PipeReader> reader) {
  tensorpipe::Pipe& pipe = *reader->pipe;
  pipe.readDescriptor(
      [this, reader](const tensorpipe::Error& error, tensorpipe::Descriptor descriptor) mutable {
        trace::point("pipe.descriptor");
        if (error) {
          reader->onError(error.what(), nullptr);
          return;
        }
        IncomingMessage& msg = reader->msg;  // cleared after the previous dispatch
        tensorpipe::Allocation allocation;
        std::string bad;
        try {
          bad = prepareRead(descriptor, msg, allocation, maxMessageBytes_);
        } catch (const c10::Error& e) {  // out of (device) memory for what the peer announced
          bad = std::string("cannot allocate the incoming message: ") + e.what_without_backtrace();
        } catch (const std::exception& e) {
          bad = std::string("cannot allocate the incoming message: ") + e.what();
        }
        if (!bad.empty()) {
          // A peer that sends what we cannot parse is broken or hostile: drop the pipe
          // (its pending calls fail) rather than guess where the next message starts.
          std::cerr << "rpcjob: worker '" << self().name << "': closing a pipe from '"
                    << reader->pipe->getRemoteName() << "': " << bad << "\n";
          wire::Header header;
          const bool decoded =
              wire::decodeHeader(descriptor.metadata.data(), descriptor.metadata.size(), header)
                  .empty();
          reader->onError(bad, decoded ? &header : nullptr);
          return;
        }
        // Apart from pipe.descriptor: a large tensor's allocation happens here,
        // TensorPipe's hand-off to its channel after.
        trace::point("read.prepared", msg.header.id);
        reader->pipe->read(std::move(allocation),
                           [this, reader](const tensorpipe::Error& error) mutable {
                             trace::point("pipe.read", reader->msg.header.id);
                             if (error) {
                               reader->onError(error.what(), nullptr);
                               return;
                             }
                             // Not on a lane's poller: readHandoff_ says why.
                             if (lane::onAPollerThread() &&
                                 readHandoff_->submit([this, reader] { dispatchRead(reader); })) {
                               return;
                             }
                             dispatchRead(std::move(reader));
                           });
      });
}

void RuntimeImpl::dispatchRead(std::shared_ptr<PipeReader> reader) {
  const AfterGpuStep afterStep;  // its releases once the message is dispatched (release_later.h)
  IncomingMessage& msg = reader->msg;
  const bool corked = reader->server != nullptr && corkWrites(*reader->server);
  std::string bad = dispatch(msg, reader->onMessage, reader->order.get());
#if RPCJOB_WITH_CUDA
  cuda::holdReceiveBuffers(msg);  // the next of its sizes finds a buffer (receive_spares.h)
#endif
  // Its tensors and events go now, not when the next message comes: the values
  // own them, and a large tensor's memory must be free (or back in its cache)
  // once those are gone.
  msg.clear();
  if (corked) uncorkWrites(reader->server);
  if (!bad.empty()) {
    std::cerr << "rpcjob: worker '" << self().name << "': closing a pipe from '"
              << reader->pipe->getRemoteName() << "': " << bad << "\n";
    reader->onError(bad, nullptr);
    return;
  }
  readNext(std::move(reader));
}

bool RuntimeImpl::corkWrites(ServerPipe& server) {
  std::lock_guard<std::mutex> lock(server.writes.mu);
  if (server.writes.busy) return false;
  server.writes.busy = true;
  return true;
}

void RuntimeImpl::uncorkWrites(const std::shared_ptr<ServerPipe>& server) {
  std::vector<std::shared_ptr<OutgoingMessage>> held;
  {
    std::lock_guard<std::mutex> lock(server->writes.mu);
    held.swap(server->writes.queued);
    if (held.empty()) {
      server->writes.busy = false;
      return;
    }
  }
  flushWrites(server->pipe, server->writes, std::move(held), server);
}

namespace {

// A message that follows lane frames goes once they went (lane/order.h).
std::string deliverInOrder(IncomingMessage& msg,
                           const std::function<void(IncomingMessage&)>& onMessage,
                           lane::Order* order) {
  if (order == nullptr || !msg.header.hasOrder) {
    onMessage(msg);
    return {};
  }
  std::string error;
  if (!order->awaitLane(msg.header.orderBefore, error)) return error;
  onMessage(msg);
  order->pipeDispatched();
  return {};
}

}  // namespace

std::string RuntimeImpl::dispatch(IncomingMessage& msg,
                                  const std::function<void(IncomingMessage&)>& onMessage,
                                  lane::Order* order) {
  // Read once if an observer asks for it; the calls of a batch share it.
  const EventTime arrived;
  msg.arrived = &arrived;
  std::string bad;
  if (msg.header.type == wire::MessageType::kBatch) {
    bad = dispatchBatch(msg, onMessage, order);
  } else {
    bad = deliverInOrder(msg, onMessage, order);
  }
  msg.arrived = nullptr;
  return bad;
}

std::string RuntimeImpl::dispatchBatch(IncomingMessage& batch,
                                       const std::function<void(IncomingMessage&)>& onMessage,
                                       lane::Order* order) {
  std::vector<wire::BatchEntry> entries;
  std::string bad = wire::decodeBatch(batch.payload.data(), batch.payload.size(), entries);
  if (!bad.empty()) return "bad batch: " + bad;
  if (!batch.tensors.empty()) return "a batch with tensors";
  IncomingMessage sub;  // reused: its payload's capacity serves the next entry
  for (const auto& e : entries) {
    sub.clear();
    sub.arrived = batch.arrived;
    bad = wire::decodeHeader(batch.payload.data() + e.headerOffset, e.headerLength, sub.header);
    if (!bad.empty()) return "bad header in a batch: " + bad;
    if (sub.header.type == wire::MessageType::kBatch) return "a batch inside a batch";
    if (sub.header.inlinePayload) return "an inline payload inside a batch";
    if (sub.header.deviceHandles) return "device handles inside a batch";
    const char* payload = batch.payload.data() + e.payloadOffset;
    sub.payload.assign(payload, payload + e.payloadLength);
    bad = deliverInOrder(sub, onMessage, order);
    if (!bad.empty()) return bad;
  }
  return {};
}

std::shared_ptr<tensorpipe::Pipe> RuntimeImpl::pipeTo(int rank, uint64_t& generation,
                                                      std::shared_ptr<WriteQueue>* writes) {
  Peer& peer = *peers_[rank];
  std::shared_ptr<tensorpipe::Pipe> pipe;
  std::shared_ptr<WriteQueue> queue;
  bool fresh = false;
  std::string full;
  {
    std::lock_guard<std::mutex> lock(peer.mu);
    if (!peer.pipe) {
      // A pipe that cannot get its descriptors makes TensorPipe abort the
      // process: fail this call instead (sendRequest sees failedPipes_).
      full = startup::fdsForPipeProblem(peer.info.name);
      if (full.empty()) {
        connectLocked(peer);
        fresh = true;
      } else {
        peer.generation++;
        peer.lastError = full;
      }
    }
    generation = peer.generation;
    pipe = peer.pipe;
    queue = peer.writes;
  }
  if (!full.empty()) {
    std::lock_guard<SpinMutex> lock(pendingMu_);
    markPipeFailedLocked(rank, generation, full);
    return nullptr;
  }
  // Outside the lock: TensorPipe may run a failing pipe's callbacks inline, and
  // failPeer takes peer.mu.
  if (fresh) startClientPipe(rank, generation, pipe, queue);
  if (writes != nullptr) *writes = std::move(queue);
  return pipe;
}

void RuntimeImpl::connectLocked(Peer& peer) {
  peer.pipe = context_->connect(peer.url, tensorpipe::PipeOptions().remoteName(peer.info.name));
  peer.generation++;
  peer.handshakeDone = false;
  peer.connectStart = Clock::now();
  // The hello goes first; calls made before startClientPipe() queue behind it.
  peer.writes = std::make_shared<WriteQueue>();
  peer.writes->busy = true;
  peer.writes->client = true;
  peer.writes->onError = [this, rank = peer.info.rank, generation = peer.generation](
                             const std::string& why) { failPeer(rank, generation, why); };
  wire::Header hello;
  hello.type = wire::MessageType::kHello;
  peer.writes->queued.push_back(makeRawMessage(hello, descriptorsBlob_));
}

void RuntimeImpl::startClientPipe(int rank, uint64_t generation,
                                  std::shared_ptr<tensorpipe::Pipe> pipe,
                                  std::shared_ptr<WriteQueue> writes) {
  if (gate_) {  // the queued hello and calls go once both sides proved themselves
    auto refused = handshakeRefused(
        workers_[rank].name,
        [this, rank, generation](const std::string& why) { failPeer(rank, generation, why); });
    gate_->admitClient(
        pipe, workers_[rank].name,
        [this, rank, generation, pipe, writes] { startAdmitted(rank, generation, pipe, writes); },
        std::move(refused));
    return;
  }
  startAdmitted(rank, generation, std::move(pipe), std::move(writes));
}

void RuntimeImpl::startAdmitted(int rank, uint64_t generation,
                                std::shared_ptr<tensorpipe::Pipe> pipe,
                                std::shared_ptr<WriteQueue> writes) {
  std::vector<std::shared_ptr<OutgoingMessage>> first;
  {
    std::lock_guard<std::mutex> lock(writes->mu);
    first.swap(writes->queued);
  }
  flushWrites(pipe, *writes, std::move(first), writes);
  readLoop(
      pipe,
      [this, rank, generation](IncomingMessage& msg) { onClientMessage(rank, generation, msg); },
      [this, rank, generation](const std::string& why, const wire::Header*) {
        failPeer(rank, generation, why);
      },
      nullptr, writes->order);
}

void RuntimeImpl::enqueueWrite(const std::shared_ptr<tensorpipe::Pipe>& pipe, WriteQueue& writes,
                               std::shared_ptr<OutgoingMessage> message,
                               std::shared_ptr<void> keepAlive,
                               std::shared_ptr<lane::Lane> activate) {
  {
    std::unique_lock<std::mutex> lock(writes.mu);
    if (activate) {  // the marker itself goes on the pipe, the first ordered message
      writes.lane = std::move(activate);
      writes.laneUp.store(true, std::memory_order_relaxed);
      writes.laneSent = 0;
      writes.pipeSent = 1;
      wire::appendOrder(message->header, 0);
    } else if (writes.lane) {
      std::string why;
      switch (routeLocked(writes, message, why)) {
        case Routed::kLane:
          lock.unlock();
          recordServed(*message);
          return;
        case Routed::kBroken:
          lock.unlock();
          laneBroken(writes, why);
          return;
        case Routed::kPipe:
          break;
      }
    }
    if (writes.busy) {
      writes.queued.push_back(std::move(message));
      return;
    }
    writes.busy = true;
  }
  writeUnit(pipe, writes, std::move(message), nullptr, std::move(keepAlive));
}

void RuntimeImpl::enqueueWrites(const std::shared_ptr<tensorpipe::Pipe>& pipe, WriteQueue& writes,
                                std::vector<std::shared_ptr<OutgoingMessage>> messages,
                                std::shared_ptr<void> keepAlive) {
  if (messages.empty()) return;
  std::vector<std::shared_ptr<OutgoingMessage>> onLane;
  std::string broken;
  {
    std::lock_guard<std::mutex> lock(writes.mu);
    if (writes.lane) {
      size_t kept = 0;
      for (auto& m : messages) {
        std::string why;
        const Routed r =
            broken.empty() ? routeLocked(writes, m, why, /*hold=*/true) : Routed::kBroken;
        if (r == Routed::kLane) {
          onLane.push_back(std::move(m));
        } else if (r == Routed::kBroken) {
          if (broken.empty()) broken = why;
        } else {
          messages[kept++] = std::move(m);
        }
      }
      messages.resize(kept);
      writes.lane->publishHeld();  // the batch's frames, with one fence and bell
    }
  }
  for (auto& m : onLane) recordServed(*m);
  if (!broken.empty()) {
    laneBroken(writes, broken);
    return;
  }
  if (messages.empty()) return;
  {
    std::lock_guard<std::mutex> lock(writes.mu);
    if (writes.busy) {
      for (auto& m : messages) writes.queued.push_back(std::move(m));
      return;
    }
    writes.busy = true;
  }
  flushWrites(pipe, writes, std::move(messages), std::move(keepAlive));
}

void RuntimeImpl::flushWrites(const std::shared_ptr<tensorpipe::Pipe>& pipe, WriteQueue& writes,
                              std::vector<std::shared_ptr<OutgoingMessage>> messages,
                              std::shared_ptr<void> keepAlive) {
  if (messages.size() == 1) {  // nothing to batch, nor to count
    writeUnit(pipe, writes, std::move(messages[0]), nullptr, std::move(keepAlive));
    return;
  }
  // Runs of tensorless messages go as one kBatch message; the rest one by one,
  // all in order (TensorPipe keeps a pipe's writes in order).
  std::vector<std::shared_ptr<OutgoingMessage>> units;
  for (size_t i = 0; i < messages.size();) {
    size_t end = i;
    while (end < messages.size() && messages[end]->tensors.empty() && end - i < wire::kMaxBatch) {
      ++end;
    }
    if (end - i < 2) {
      units.push_back(std::move(messages[i]));
      ++i;
      continue;
    }
    auto batch = std::make_shared<OutgoingMessage>();
    batch->inlinePayload = !writes.client;
    wire::Header h;
    h.type = wire::MessageType::kBatch;
    batch->header = wire::encodeHeader(h);
    batch->hasPayload = true;
    size_t bytes = 4;
    for (size_t j = i; j < end; ++j) {
      bytes += 8 + messages[j]->header.size() + messages[j]->payload.size();
    }
    batch->payload.reserve(bytes);
    wire::appendBatchCount(batch->payload, static_cast<uint32_t>(end - i));
    if (options_.observer) batch->servedInBatch.reserve(end - i);
    for (size_t j = i; j < end; ++j) {
      auto& m = *messages[j];
      wire::appendBatchEntry(batch->payload, m.header, m.payload.data(),
                             m.hasPayload ? m.payload.size() : 0);
      if (m.served) batch->servedInBatch.push_back(std::move(*m.served));
    }
    units.push_back(std::move(batch));
    i = end;
  }
  auto left = units.size() > 1 ? std::make_shared<std::atomic<size_t>>(units.size()) : WritesLeft();
  for (auto& unit : units) writeUnit(pipe, writes, std::move(unit), left, keepAlive);
}

void RuntimeImpl::writeUnit(const std::shared_ptr<tensorpipe::Pipe>& pipe, WriteQueue& writes,
                            std::shared_ptr<OutgoingMessage> unit, WritesLeft left,
                            std::shared_ptr<void> keepAlive) {
  trace::point("pipe.write");
  tensorpipe::Message message = unit->toTensorpipe();  // before `unit` moves below
  writesInFlight_.fetch_add(1, std::memory_order_relaxed);
  pipe->write(std::move(message),
              [this, unit = std::move(unit), left = std::move(left), pipe, &writes,
               keepAlive = std::move(keepAlive)](const tensorpipe::Error& error) {
                trace::point("pipe.written");
                // After the writes this one starts below: the count never
                // touches 0 while more are on their way.
                struct Completed {
                  RuntimeImpl* rt;
                  ~Completed() { rt->writeCompleted(); }
                } completed{this};
                if (error && writes.onError) writes.onError(error.what());
                recordServed(*unit);
                holdDeviceTensors(unit);
                if (left && left->fetch_sub(1) != 1) return;
                std::vector<std::shared_ptr<OutgoingMessage>> next;
                {
                  std::lock_guard<std::mutex> lock(writes.mu);
                  if (writes.queued.empty()) {
                    writes.busy = false;
                    return;
                  }
                  next.swap(writes.queued);
                }
                flushWrites(pipe, writes, std::move(next), keepAlive);
              });
}

void RuntimeImpl::writeCompleted() {
  if (writesInFlight_.fetch_sub(1, std::memory_order_acq_rel) != 1 || !closing_.load()) return;
  std::lock_guard<SpinMutex> lock(pendingMu_);  // the shutdown waits under it: no lost wake-up
  pendingCv_.notify_all();
}

void RuntimeImpl::holdDeviceTensors(const std::shared_ptr<OutgoingMessage>& message) {
  size_t bytes = 0;
  bool device = false;
  for (size_t i = 0; i < message->streams.size(); ++i) {
    if (message->streams[i] == nullptr) continue;
    device = true;
    bytes += message->tensors[i].nbytes();
  }
  // Our reference may be a sent tensor's last: freed on TensorPipe's thread now,
  // while the peer may be computing on a GPU we share (release_later.h).
  if (device) releaseLater(message, bytes);
}

void RuntimeImpl::recordServed(const OutgoingMessage& message) {
  if (!options_.observer || (!message.served && message.servedInBatch.empty())) return;
  const EventTime now;  // one read for a whole batch
  if (message.served) recordServed(*message.served, now);
  for (const auto& call : message.servedInBatch) recordServed(call, now);
}

void RuntimeImpl::recordServed(const ServedCall& call, const EventTime& now) {
  options_.observer->serverCallFinished(call.function, callerOf(call.callerRank).name, call.status,
                                        call.token, now);
}

namespace {
// The poller thread's served calls whose answers its turn holds. A poller
// thread serves one runtime, and a turn's end records them all (prepareLane's
// publisher), so no list outlives its turn.
thread_local std::vector<ServedCall> tServedInTurn;
}  // namespace

void RuntimeImpl::deferServed(ServedCall call) {
  tServedInTurn.push_back(std::move(call));
}

void RuntimeImpl::recordServedInTurn() {
  if (tServedInTurn.empty()) return;
  const EventTime now;  // one read for the turn's answers, published together
  for (const ServedCall& call : tServedInTurn) recordServed(call, now);
  tServedInTurn.clear();  // keeps its capacity: no allocation per turn
}

bool RuntimeImpl::waitHandshake(int rank, Clock::time_point deadline, std::string& error) {
  Peer& peer = *peers_[rank];
  std::unique_lock<std::mutex> lock(peer.mu);
  peer.handshakeCv.wait_until(lock, deadline, [&] { return peer.handshakeDone || !peer.pipe; });
  error = peer.lastError.empty() ? "no handshake answer" : peer.lastError;
  return peer.handshakeDone;
}

void RuntimeImpl::onClientMessage(int rank, uint64_t generation, IncomingMessage& msg) {
  if (msg.header.type == wire::MessageType::kLaneReply) {
    onLaneReply(rank, generation, msg);
    return;
  }
  if (msg.header.type == wire::MessageType::kLaneCopied) {
    onLaneCopied(rank, generation, msg);
    return;
  }
  if (msg.header.type == wire::MessageType::kLaneOffers) {
    onLaneOffers(rank, generation, msg);
    return;
  }
  if (msg.header.type != wire::MessageType::kHelloReply) {
    trace::point("call.response", msg.header.id);
    auto pending = takePending(msg.header.id);
    if (msg.header.type == wire::MessageType::kError &&
        msg.header.errorKind == wire::ErrorKind::kRefused) {
      // The peer reads nothing more from this pipe: the other calls on it fail
      // now, with the reason, and the next call connects anew -- including one
      // made as soon as the refused call completes, hence this order.
      failPeer(rank, generation,
               "worker '" + workers_[rank].name + "' " + msg.header.error +
                   " (and reads nothing more from this connection)");
    }
    if (pending) completePending(std::move(*pending), msg);
    return;
  }
  Peer& peer = *peers_[rank];
  wire::ChannelDescriptors remote;
  std::string bad = wire::decodeChannelDescriptors(msg.payload.data(), msg.payload.size(), remote);
  std::vector<ChannelChoice> choices;
  if (bad.empty()) {
#if RPCJOB_WITH_CUDA
    deviceMaps_.onCalleeDescriptors(peer.info.name, remote);  // before start() looks
#endif
    std::string transport = selectTransport(registry_, remote);
    for (const auto& s : selectChannels(registry_, remote)) {
      choices.push_back({peer.info.name, s.localDevice, s.remoteDevice, s.channel, transport});
    }
  }
  Clock::duration handshake;
  {
    std::lock_guard<std::mutex> lock(peer.mu);
    if (peer.generation != generation) return;
    peer.handshakeDone = true;
    peer.lastError.clear();
    peer.choices = choices;
    handshake = Clock::now() - peer.connectStart;
  }
  peer.handshakeCv.notify_all();
  if (auto& observer = options_.observer) {
    observer->pipeOpened(peer.info.name, handshake);
    for (const auto& c : choices) {
      observer->channelSelected(c.peer, c.localDevice, c.remoteDevice, c.channel);
    }
  }
  if (bad.empty()) offerLane(rank, generation, remote);
}

void RuntimeImpl::failPeer(int rank, uint64_t generation, const std::string& why) {
  Peer& peer = *peers_[rank];
  std::shared_ptr<tensorpipe::Pipe> broken;
  std::shared_ptr<WriteQueue> brokenWrites;
  {
    std::lock_guard<std::mutex> lock(peer.mu);
    if (peer.generation != generation || !peer.pipe) return;
    broken = std::move(peer.pipe);
    peer.pipe.reset();
    brokenWrites = std::move(peer.writes);
    peer.handshakeDone = false;
    peer.lastError = why;
  }
  peer.handshakeCv.notify_all();
  if (brokenWrites) closeLane(*brokenWrites);
  broken->close();
  // Fail every call still waiting on that pipe; the next call dials again.
  std::vector<Pending> failed;
  const auto onThatPipe = [&](const Pending& p) {
    return p.peer == rank && p.generation == generation;
  };
  {
    std::lock_guard<SpinMutex> lock(pendingMu_);
    markPipeFailedLocked(rank, generation, why);  // calls registered from now on fail at once
    failed = pending_.takeIf(onThatPipe);
    unanswered_[rank] -= static_cast<int>(failed.size());
  }
  slots_.takeIf(onThatPipe, failed);  // after the mark: none slips past (pending_slots.h)
  {
    // A graceful shutdown waits for the calls to drain, checking under the lock:
    // a notify without it could fall between its check and its wait.
    std::lock_guard<SpinMutex> lock(pendingMu_);
    pendingCv_.notify_all();
  }
  failPending(std::move(failed), std::make_exception_ptr(connectionError(peer.info.name, why)));
}

std::vector<ChannelChoice> RuntimeImpl::channelChoices() const {
  std::vector<ChannelChoice> out;
  for (const auto& peer : peers_) {
    std::lock_guard<std::mutex> lock(peer->mu);
    out.insert(out.end(), peer->choices.begin(), peer->choices.end());
  }
  return out;
}

// ---- Runtime: the public face

Runtime::Runtime(Assignment assignment, const std::string& name, RuntimeOptions options)
    : impl_(std::make_shared<RuntimeImpl>(*this, std::move(assignment), name, std::move(options))) {
  impl_->weakSelf_ = impl_;
}

std::unique_ptr<Runtime> Runtime::fromEnvironment() {
  Identity identity = identityFromEnvironment();
  RuntimeOptions options = optionsFromAssignment(identity.assignment, identity.name);
  applyEnvironment(options);
  return std::make_unique<Runtime>(std::move(identity.assignment), identity.name,
                                   std::move(options));
}

Runtime::~Runtime() {
  impl_->shutdown(ShutdownMode::kImmediate, std::chrono::milliseconds(0));
}

void Runtime::registerFunction(const std::string& name, Function fn, FunctionOptions options) {
  impl_->registerFunction(name, std::move(fn), nullptr, options);
}
void Runtime::registerAsyncFunction(const std::string& name, AsyncFunction fn,
                                    FunctionOptions options) {
  impl_->registerFunction(name, nullptr, std::move(fn), options);
}
void Runtime::start() {
  impl_->start();
}
const WorkerInfo& Runtime::self() const {
  return impl_->self();
}
const WorkerInfo& Runtime::worker(const std::string& name) const {
  return impl_->workers()[impl_->rankOf(name)];
}
const WorkerInfo& Runtime::worker(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(impl_->workers().size())) {
    throw RpcError(ErrorCode::kInvalidArgument, "", "no worker of rank " + std::to_string(rank));
  }
  return impl_->workers()[rank];
}
const std::vector<WorkerInfo>& Runtime::workers() const {
  return impl_->workers();
}
Future Runtime::rpcAsync(const std::string& to, const std::string& function,
                         std::vector<c10::IValue> args, CallOptions options) {
  return impl_->rpcAsync(to, function, std::move(args), options);
}
c10::IValue Runtime::rpcSync(const std::string& to, const std::string& function,
                             std::vector<c10::IValue> args, CallOptions options) {
  return impl_->rpcAsync(to, function, std::move(args), options).valueOnStreams();
}
RRef Runtime::remote(const std::string& to, const std::string& function,
                     std::vector<c10::IValue> args, CallOptions options) {
  return impl_->remote(to, function, std::move(args), options);
}
RRef Runtime::rrefFromIValue(const c10::IValue& value) {
  return impl_->rrefFromIValue(value);
}
RRef Runtime::makeRRef(c10::IValue value) {
  return impl_->makeRRef(std::move(value));
}
std::vector<ChannelChoice> Runtime::channelChoices() const {
  return impl_->channelChoices();
}
void Runtime::shutdown(ShutdownMode mode, std::chrono::milliseconds deadline) {
  detail::flushCallBatch();  // a graceful shutdown waits for the calls held
  impl_->shutdown(mode, deadline);
  // RPCJOB_TRACE: written now as well as at exit, for programs that end with
  // _exit (a forked worker) and so never run exit's handlers.
  trace::flush();
}

}  // namespace rpcjob::runtime
