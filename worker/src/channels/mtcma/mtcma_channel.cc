#include "mtcma_channel.h"

#include "../../host_memory/peer_regions.h"
#include "../../host_memory/shared_arena.h"
#include "../../trace/trace.h"
#include "../copy_context.h"
#include "chunk_plan.h"
#include "wire_message.h"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

// PyTorch's libtorch lacks these interface headers; the CUDA build finds Debian's
// libtensorpipe-dev copies through RPCJOB_TENSORPIPE_EXTRA_INCLUDE_DIR.
#include <tensorpipe/channel/channel.h>
#include <tensorpipe/channel/context.h>
#include <tensorpipe/common/buffer.h>
#include <tensorpipe/common/cpu_buffer.h>
#include <tensorpipe/common/device.h>
#include <tensorpipe/common/error.h>
#include <tensorpipe/transport/connection.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace rpcjob::runtime::channels {
namespace {

using tensorpipe::Buffer;
using tensorpipe::CpuBuffer;
using tensorpipe::Device;
using tensorpipe::Error;

size_t envSize(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(v, &end, 10);
  return (end == v || parsed == 0) ? fallback : static_cast<size_t>(parsed);
}

std::string firstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string namespaceId(const char* kind) {
  char target[256] = {0};
  std::string path = std::string("/proc/self/ns/") + kind;
  ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

std::string permittedCapabilities() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapPrm:", 0) == 0) {
      size_t at = line.find_first_not_of(" \t", 7);
      return at == std::string::npos ? std::string() : line.substr(at);
    }
  }
  return "";
}

// A process_vm_readv on ourselves skips every permission check, so a failure
// can only be a seccomp filter on the syscall (Docker's default profile).
bool processVmReadvWorks() {
  uint64_t source = 0x5eed5eed5eed5eedULL;
  uint64_t target = 0;
  iovec local{&target, sizeof(target)};
  iovec remote{&source, sizeof(source)};
  ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  return n == static_cast<ssize_t>(sizeof(target)) && target == source;
}

// The CPU device descriptor, or "" when the channel cannot work here (`why`).
std::string makeDescriptor(std::string& why) {
  std::string boot = firstLine("/proc/sys/kernel/random/boot_id");
  std::string pidNs = namespaceId("pid");
  std::string userNs = namespaceId("user");
  if (boot.empty() || pidNs.empty() || userNs.empty()) {
    why = "cannot read the boot id or the pid/user namespaces";
    return "";
  }
  uid_t ruid, euid, suid;
  gid_t rgid, egid, sgid;
  if (::getresuid(&ruid, &euid, &suid) != 0 || ::getresgid(&rgid, &egid, &sgid) != 0) {
    why = "getresuid/getresgid failed";
    return "";
  }
  if (ruid != euid || ruid != suid || rgid != egid || rgid != sgid) {
    why = "real, effective and saved user/group ids differ";
    return "";
  }
  if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 1) {
    why = "process is not dumpable";
    return "";
  }
  // Yama: absent or 0, classic ptrace rules; 1, only descendants, unless the
  // target allows any tracer (what cma does too); 2 and 3, no.
  std::string scope = firstLine("/proc/sys/kernel/yama/ptrace_scope");
  if (!scope.empty()) {
    int value = std::atoi(scope.c_str());
    if (value == 1) {
      if (::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0) {
        why = "yama ptrace_scope 1 and PR_SET_PTRACER failed";
        return "";
      }
    } else if (value != 0) {
      why = "yama ptrace_scope " + scope;
      return "";
    }
  }
  if (!processVmReadvWorks()) {
    why = "process_vm_readv is blocked (seccomp?)";
    return "";
  }
  return std::string(kMtCmaChannelName) + "/" + std::to_string(kMtCmaWireVersion) + ":" + boot +
         "_" + pidNs + "_" + userNs + "_" + std::to_string(ruid) + "_" + std::to_string(rgid) +
         "_" + permittedCapabilities();
}

// Reads [remote, remote + length) of `pid` into `local`; "" or what went wrong.
std::string readRemote(pid_t pid, char* local, uint64_t remote, size_t length) {
  // read(2)'s per-call cap applies to process_vm_readv as well.
  constexpr size_t kMaxPerCall = 0x7ffff000;
  size_t done = 0;
  while (done < length) {
    size_t want = std::min(length - done, kMaxPerCall);
    iovec l{local + done, want};
    iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(remote + done)), want};
    ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      return "process_vm_readv from pid " + std::to_string(pid) + ": " + std::strerror(e);
    }
    if (static_cast<size_t>(n) != want) {
      return "process_vm_readv from pid " + std::to_string(pid) + ": short read (" +
             std::to_string(n) + " of " + std::to_string(want) + " bytes)";
    }
    done += want;
  }
  return "";
}

using WireMessage = MtCmaWire;

// mtCmaCounters()'s, process-wide.
std::atomic<uint64_t> sharedReads{0}, sharedBytes{0}, cmaReads{0}, cmaBytes{0};

struct PendingSend {
  tensorpipe::channel::TSendCallback callback;
};
struct PendingRecv {
  char* ptr;
  size_t length;
  tensorpipe::channel::TRecvCallback callback;
};

// Runs tasks on a few threads; drains its queue before the threads exit. The
// threads share the queue's state, so a task that drops the last reference to
// the context (and so to the pool) does not pull the state from under them.
class CopyPool {
 public:
  // spin: how long an idle thread polls the queue before it sleeps (0: sleeps
  // at once). A sleeping thread costs a futex wake-up, and on a virtual machine
  // an idle vCPU's wake-up, before it starts its piece.
  CopyPool(size_t threads, std::chrono::microseconds spin) : state_(std::make_shared<State>()) {
    state_->spin = spin;
    for (size_t i = 0; i < threads; ++i) {
      threads_.emplace_back([state = state_] { loop(*state); });
    }
  }
  ~CopyPool() { stop(); }

  void post(std::vector<std::function<void()>> tasks) {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      for (auto& t : tasks) state_->tasks.push_back(std::move(t));
      state_->queued.store(state_->tasks.size(), std::memory_order_release);
    }
    // One wake-up per task: a transfer of fewer pieces than threads leaves the
    // rest asleep rather than racing them for the queue's lock.
    if (tasks.size() >= threads_.size()) {
      state_->cv.notify_all();
    } else {
      for (size_t i = 0; i < tasks.size(); ++i) state_->cv.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->stopping) return;
      state_->stopping = true;
      state_->stopRequested.store(true, std::memory_order_release);
    }
    state_->cv.notify_all();
    for (auto& t : threads_) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();  // a pool task dropped the last reference to the context
      } else if (t.joinable()) {
        t.join();
      }
    }
  }

  size_t size() const { return threads_.size(); }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    bool stopping = false;
    std::chrono::microseconds spin{0};
    std::atomic<size_t> queued{0};  // tasks.size(), read without the lock
    std::atomic<bool> stopRequested{false};
  };

  static void spinForWork(State& state) {
    const auto until = std::chrono::steady_clock::now() + state.spin;
    while (state.queued.load(std::memory_order_acquire) == 0 &&
           !state.stopRequested.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
  }

  static void loop(State& state) {
    for (;;) {
      std::function<void()> task;
      if (state.spin.count() > 0) spinForWork(state);
      {
        std::unique_lock<std::mutex> lock(state.mu);
        state.cv.wait(lock, [&state] { return state.stopping || !state.tasks.empty(); });
        if (state.tasks.empty()) return;  // stopping, queue drained
        task = std::move(state.tasks.front());
        state.tasks.pop_front();
        state.queued.store(state.tasks.size(), std::memory_order_release);
      }
      task();
    }
  }

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

class MtCmaChannel;

class MtCmaContext final : public CopyContext, public std::enable_shared_from_this<MtCmaContext> {
 public:
  explicit MtCmaContext(size_t threads) {
    std::string why;
    std::string descriptor = makeDescriptor(why);
    if (descriptor.empty()) return;  // not viable: TensorPipe never sees it
    size_t hardware = std::max<size_t>(1, std::thread::hardware_concurrency());
    if (threads == 0) threads = envSize("RPCJOB_MTCMA_THREADS", std::min<size_t>(8, hardware));
    chunkBytes_ = envSize("RPCJOB_MTCMA_CHUNK_BYTES", 0);
    const std::chrono::microseconds spin(envSize("RPCJOB_MTCMA_SPIN_US", 0));
    pool_ = std::make_unique<CopyPool>(std::max<size_t>(1, threads), spin);
    peers_ =
        std::make_unique<host_memory::PeerMappings>(host_memory::PeerMappings::maxBytesFromEnv());
    setViable({{Device{tensorpipe::kCpuDeviceType, 0}, std::move(descriptor)}});
  }
  ~MtCmaContext() override {
    if (pool_) pool_->stop();
  }

  bool canCommunicateWithRemote(const std::string& local,
                                const std::string& remote) const override {
    return !local.empty() && local == remote;
  }
  void join() override {
    close();
    if (pool_) pool_->stop();
  }

  CopyPool& pool() { return *pool_; }
  host_memory::PeerMappings& peerMappings() { return *peers_; }
  ChunkPlan planFor(size_t length) const { return planChunks(length, pool_->size(), chunkBytes_); }

 private:
  std::shared_ptr<CopyChannelBase> makeChannel(
      std::shared_ptr<tensorpipe::transport::Connection> connection) override;

  size_t chunkBytes_ = 0;
  std::unique_ptr<CopyPool> pool_;
  std::unique_ptr<host_memory::PeerMappings> peers_;
};

class MtCmaChannel final : public CopyChannel<MtCmaChannel, WireMessage, PendingSend, PendingRecv> {
 public:
  MtCmaChannel(std::shared_ptr<MtCmaContext> context,
               std::shared_ptr<tensorpipe::transport::Connection> connection)
      : CopyChannel(std::move(connection)), context_(std::move(context)) {}

 private:
  friend CopyChannel;

  static Error makeError(const std::string& what) {
    return Error(std::make_shared<ChannelError>(kMtCmaChannelName, what), __FILE__, __LINE__);
  }

  bool describe(Buffer& buffer, WireMessage& m, PendingSend&, std::string&) {
    const void* ptr = buffer.unwrap<CpuBuffer>().ptr;
    m.pid = static_cast<int64_t>(::getpid());
    m.address = reinterpret_cast<uintptr_t>(ptr);
    const auto& arena = host_memory::SharedArena::instance();
    if (auto span = arena.find(ptr, m.length)) {
      m.regionFd = span->fd;
      m.token = arena.token();
      m.regionId = span->id;
      m.regionOffset = span->offset;
    }
    return true;
  }
  void release(PendingSend&) {}
  Error acked(PendingSend&, const WireMessage& ack) {
    return ack.status == 0 ? Error::kSuccess : makeError("the receiver could not read the data");
  }
  static PendingRecv pendingRecv(Buffer& buffer, size_t length,
                                 tensorpipe::channel::TRecvCallback callback) {
    return PendingRecv{static_cast<char*>(buffer.unwrap<CpuBuffer>().ptr), length,
                       std::move(callback)};
  }

  // Where a transfer's bytes come from: a mapping of the sender's shared
  // region (memcpy), or, without one, the sender's memory (process_vm_readv).
  struct Source {
    std::shared_ptr<const host_memory::PeerMapping> mapping;  // keeps it mapped
    const char* bytes = nullptr;                              // the range's start in it
  };

  // Bytes [offset, offset + length) of the transfer into `to` + offset.
  static std::string readRange(const Source& source, const WireMessage& m, char* to, size_t offset,
                               size_t length) {
    if (source.bytes != nullptr) {
      std::memcpy(to + offset, source.bytes + offset, length);
      return "";
    }
    return readRemote(static_cast<pid_t>(m.pid), to + offset, m.address + offset, length);
  }

  // A split read: the pieces count down; the last one finishes the transfer.
  struct Transfer {
    PendingRecv recv;
    WireMessage request;
    Source source;
    ChunkPlan plan;
    std::atomic<size_t> remaining{0};
    std::mutex mu;
    std::string error;
  };

  // Reads piece i of the transfer; the last piece to end acks and completes it.
  void readPiece(const std::shared_ptr<Transfer>& transfer, size_t i) {
    const size_t offset = i * transfer->plan.piece;
    const size_t length = std::min(transfer->plan.piece, transfer->recv.length - offset);
    // Once the channel failed, the sender may already reuse its memory.
    std::string error = failure();
    if (error.empty()) {
      error = readRange(transfer->source, transfer->request, transfer->recv.ptr, offset, length);
    }
    if (!error.empty()) {
      std::lock_guard<std::mutex> lock(transfer->mu);
      if (transfer->error.empty()) transfer->error = error;
    }
    if (transfer->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::string final;
      {
        std::lock_guard<std::mutex> lock(transfer->mu);
        final = transfer->error;
      }
      finish(std::move(transfer->recv), transfer->request, transfer->source, final);
    }
  }

  void copy(PendingRecv r, const WireMessage& m) {
    if (m.length != r.length) {
      finish(std::move(r), m, Source{},
             "length mismatch: " + std::to_string(m.length) + " sent, " + std::to_string(r.length) +
                 " expected");
      return;
    }
    Source source;
    if (m.regionFd != -1) {
      std::string error;
      source.mapping = context_->peerMappings().map(
          host_memory::PeerRegion{m.pid, m.token, m.regionId, m.regionFd, m.regionOffset, m.length},
          error);
      if (source.mapping == nullptr) {
        finish(std::move(r), m, source, error);
        return;
      }
      source.bytes = source.mapping->base() + m.regionOffset;
    }
    const ChunkPlan plan = context_->planFor(r.length);
    trace::point("cma.copy", plan.pieces);
    if (plan.pieces <= 1) {
      std::string error = readRange(source, m, r.ptr, 0, r.length);
      finish(std::move(r), m, source, error);
      return;
    }
    auto transfer = std::make_shared<Transfer>();
    transfer->recv = std::move(r);
    transfer->request = m;
    transfer->source = std::move(source);
    transfer->plan = plan;
    transfer->remaining = plan.pieces;
    const size_t first = plan.readerTakesFirst ? 1 : 0;
    std::vector<std::function<void()>> tasks;
    tasks.reserve(plan.pieces - first);
    auto self = shared_from_this();
    for (size_t i = first; i < plan.pieces; ++i) {
      tasks.push_back([self, transfer, i] { self->readPiece(transfer, i); });
    }
    context_->pool().post(std::move(tasks));
    if (first == 1) readPiece(transfer, 0);  // while the pool reads the rest
  }

  // Acks the sender (with the outcome) and completes the receive.
  void finish(PendingRecv r, const WireMessage& m, const Source& source, const std::string& error) {
    if (error.empty()) {
      (source.bytes != nullptr ? sharedReads : cmaReads).fetch_add(1, std::memory_order_relaxed);
      (source.bytes != nullptr ? sharedBytes : cmaBytes)
          .fetch_add(m.length, std::memory_order_relaxed);
    }
    auto ack = ackFor(m);
    ack->status = error.empty() ? 0 : 1;
    acknowledge(std::move(ack), r, error);
  }

  std::shared_ptr<MtCmaContext> context_;
};

std::shared_ptr<CopyChannelBase> MtCmaContext::makeChannel(
    std::shared_ptr<tensorpipe::transport::Connection> connection) {
  return std::make_shared<MtCmaChannel>(shared_from_this(), std::move(connection));
}

}  // namespace

std::shared_ptr<tensorpipe::channel::Context> createMtCmaChannel(size_t threads) {
  return std::make_shared<MtCmaContext>(threads);
}

MtCmaCounters mtCmaCounters() {
  return MtCmaCounters{
      sharedReads.load(std::memory_order_relaxed), sharedBytes.load(std::memory_order_relaxed),
      cmaReads.load(std::memory_order_relaxed), cmaBytes.load(std::memory_order_relaxed)};
}

}  // namespace rpcjob::runtime::channels
