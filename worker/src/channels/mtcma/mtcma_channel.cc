#include "mtcma_channel.h"

#include "../../host_memory/peer_regions.h"
#include "../../host_memory/shared_arena.h"
#include "../../trace/trace.h"
#include "../copy_context.h"
#include "chunk_plan.h"
#include "copy_pool.h"
#include "rpcjob/runtime/shared_host.h"
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
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
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
std::atomic<uint64_t> pushedReads{0}, pushedBytes{0}, pushesRefused{0};

struct PendingSend {
  tensorpipe::channel::TSendCallback callback;
  const char* ptr = nullptr;  // what a push copies from
  size_t length = 0;
};
struct PendingRecv {
  char* ptr;
  size_t length;
  tensorpipe::channel::TRecvCallback callback;
  WireMessage request;  // the sender's, while parked for a push
};

// A push pays one control message more than a pull; below this it cannot win.
constexpr size_t kMinPush = 2 * kMinPiece;

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
    const char* push = std::getenv("RPCJOB_MTCMA_PUSH");
    askForPushes_ = push == nullptr || std::string(push) != "0";
    const std::chrono::microseconds spin(envSize("RPCJOB_MTCMA_SPIN_US", 0));
    pool_ = std::make_unique<CopyPool>(std::max<size_t>(1, threads), spin);
    const size_t mapBytes = host_memory::PeerMappings::maxBytesFromEnv();
    peers_ = std::make_unique<host_memory::PeerMappings>(mapBytes);
    writablePeers_ =
        std::make_unique<host_memory::PeerMappings>(mapBytes, host_memory::PeerAccess::kWrite);
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
  host_memory::PeerMappings& writablePeerMappings() { return *writablePeers_; }
  ChunkPlan planFor(size_t length) const { return planChunks(length, pool_->size(), chunkBytes_); }
  bool askForPushes() const { return askForPushes_; }

 private:
  std::shared_ptr<CopyChannelBase> makeChannel(
      std::shared_ptr<tensorpipe::transport::Connection> connection) override;

  size_t chunkBytes_ = 0;
  bool askForPushes_ = true;
  std::unique_ptr<CopyPool> pool_;
  std::unique_ptr<host_memory::PeerMappings> peers_;
  std::unique_ptr<host_memory::PeerMappings> writablePeers_;
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

  bool describe(Buffer& buffer, WireMessage& m, PendingSend& s, std::string&) {
    const void* ptr = buffer.unwrap<CpuBuffer>().ptr;
    s.ptr = static_cast<const char*>(ptr);
    s.length = m.length;
    m.pid = static_cast<int64_t>(::getpid());
    m.address = reinterpret_cast<uintptr_t>(ptr);
    nameRegion(m, ptr);
    return true;
  }

  // Names in `m` the arena region [ptr, ptr + m.length) lies in, if any: what a
  // peer maps (our send's source, or our receive's destination for a push).
  static bool nameRegion(WireMessage& m, const void* ptr) {
    const auto& arena = host_memory::SharedArena::instance();
    auto span = arena.find(ptr, m.length);
    if (!span) return false;
    m.regionFd = span->fd;
    m.token = arena.token();
    m.regionId = span->id;
    m.regionOffset = span->offset;
    return true;
  }
  // The peer's region a message names.
  static host_memory::PeerRegion regionOf(const WireMessage& m) {
    return host_memory::PeerRegion{m.pid,      m.token,        m.regionId,
                                   m.regionFd, m.regionOffset, m.length};
  }
  void release(PendingSend&) {}
  Error acked(PendingSend&, const WireMessage& ack) {
    return ack.status == 0 ? Error::kSuccess : makeError("the receiver could not read the data");
  }
  static PendingRecv pendingRecv(Buffer& buffer, size_t length,
                                 tensorpipe::channel::TRecvCallback callback) {
    return PendingRecv{static_cast<char*>(buffer.unwrap<CpuBuffer>().ptr), length,
                       std::move(callback), WireMessage{}};
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

  // The receiver's side of a send: a push when the sender's bytes are private
  // and ours land in the arena (the sender copies with memcpy into a mapping
  // of our region, where we would pull with process_vm_readv), else a pull.
  void copy(PendingRecv r, const WireMessage& m) {
    if (m.length != r.length) {
      finish(std::move(r), m, Source{},
             "length mismatch: " + std::to_string(m.length) + " sent, " + std::to_string(r.length) +
                 " expected");
      return;
    }
    if (m.regionFd == -1 && r.length >= kMinPush && context_->askForPushes()) {
      WireMessage ask;
      ask.kind = CopyKind::kPushRequest;
      ask.seq = m.seq;
      ask.pid = static_cast<int64_t>(::getpid());
      ask.length = r.length;
      if (nameRegion(ask, r.ptr)) {
        r.request = m;
        trace::point("cma.push.ask", r.length);
        park(m.seq, std::move(r));  // first: the answer may come before post() returns
        post(std::make_shared<WireMessage>(ask));
        return;
      }
    }
    pull(std::move(r), m);
  }

  // Reads the sender's bytes ourselves, then acks.
  void pull(PendingRecv r, const WireMessage& m) {
    Source source;
    if (m.regionFd != -1) {
      std::string error;
      source.mapping = context_->peerMappings().map(regionOf(m), error);
      if (source.mapping == nullptr) {
        finish(std::move(r), m, source, error);
        return;
      }
      source.bytes = source.mapping->base() + m.regionOffset;
    }
    const ChunkPlan plan = context_->planFor(r.length);
    trace::point("cma.copy", plan.pieces);
    auto self = shared_from_this();
    char* to = r.ptr;
    const size_t length = r.length;
    auto recv = std::make_shared<PendingRecv>(std::move(r));
    copyInPieces(
        context_->pool(), plan, length,
        [self, source, m, to](size_t offset, size_t n) {
          // Once the channel failed, the sender may already reuse its memory.
          std::string error = self->failure();
          return error.empty() ? readRange(source, m, to, offset, n) : error;
        },
        [self, recv, m, source](const std::string& error) {
          self->finish(std::move(*recv), m, source, error);
        });
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

  // The push's two messages; anything else is unknown (false).
  bool onControl(const WireMessage& m) {
    if (m.kind == CopyKind::kPushRequest) {
      push(m);
      return true;
    }
    if (m.kind == CopyKind::kPushed) {
      pushed(m);
      return true;
    }
    return false;
  }

  // The sender's side: the receiver asks us to write our bytes into its
  // region. Its answer, kPushed, says how it went: 0 written, 1 failed while
  // writing, 2 refused before touching anything (the receiver then pulls, and
  // acks as usual).
  void push(const WireMessage& ask) {
    auto answer = std::make_shared<WireMessage>();
    answer->kind = CopyKind::kPushed;
    answer->seq = ask.seq;
    if (ask.pid == static_cast<int64_t>(::getpid())) {
      fail("a push request names a region of this process");  // never ours to write
      return;
    }
    std::string error;
    auto mapping = context_->writablePeerMappings().map(regionOf(ask), error);
    if (mapping == nullptr) {
      // The receiver's region is out of our reach (its descriptor closed
      // meanwhile, or a write mapping denied): it reads ours instead.
      answer->status = 2;
      trace::point("cma.push.refused");
      post(std::move(answer));
      return;
    }
    std::optional<PendingSend> send = takeSend(ask.seq);
    if (!send) {
      if (failure().empty()) fail("a push request for no pending send");
      return;
    }
    if (send->length != ask.length) {
      send->callback(makeError("a push request for " + std::to_string(ask.length) + " bytes of a " +
                               std::to_string(send->length) + "-byte send"));
      fail("a push request of the wrong length");
      return;
    }
    const ChunkPlan plan = context_->planFor(ask.length);
    trace::point("cma.push", plan.pieces);
    auto self = shared_from_this();
    char* to = mapping->writable() + ask.regionOffset;
    const char* from = send->ptr;
    auto pending = std::make_shared<PendingSend>(std::move(*send));
    copyInPieces(
        context_->pool(), plan, ask.length,
        [mapping, to, from](size_t offset, size_t n) {
          std::memcpy(to + offset, from + offset, n);
          return std::string();
        },
        [self, pending, answer](const std::string& error) {
          answer->status = error.empty() ? 0 : 1;
          self->post(answer);
          trace::point("cma.pushed");
          const std::string failed = self->failure();
          pending->callback(failed.empty() ? Error::kSuccess : makeError(failed));
        });
  }

  // The receiver's side: the sender's answer to our push request.
  void pushed(const WireMessage& answer) {
    std::optional<PendingRecv> r = unpark(answer.seq);
    if (!r) {
      if (failure().empty()) fail("a push answer for no receive asked");
      return;
    }
    if (answer.status == 2) {
      pushesRefused.fetch_add(1, std::memory_order_relaxed);
      const WireMessage request = r->request;
      pull(std::move(*r), request);
      return;
    }
    if (answer.status != 0) {
      r->callback(makeError("the sender could not write the data"));
      return;
    }
    pushedReads.fetch_add(1, std::memory_order_relaxed);
    pushedBytes.fetch_add(r->length, std::memory_order_relaxed);
    trace::point("copy.received");
    r->callback(Error::kSuccess);
  }

  // A receive failed while the sender may still write into its region: the
  // region must not go back to the arena's cache, under another tensor.
  void abandon(PendingRecv& r) { host_memory::SharedArena::instance().retire(r.ptr); }

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
  MtCmaCounters c;
  c.sharedReads = sharedReads.load(std::memory_order_relaxed);
  c.sharedBytes = sharedBytes.load(std::memory_order_relaxed);
  c.cmaReads = cmaReads.load(std::memory_order_relaxed);
  c.cmaBytes = cmaBytes.load(std::memory_order_relaxed);
  c.pushedReads = pushedReads.load(std::memory_order_relaxed);
  c.pushedBytes = pushedBytes.load(std::memory_order_relaxed);
  c.pushesRefused = pushesRefused.load(std::memory_order_relaxed);
  return c;
}

}  // namespace rpcjob::runtime::channels

namespace rpcjob::runtime {

HostReceivePaths hostReceivePaths() {
  const channels::MtCmaCounters c = channels::mtCmaCounters();
  return HostReceivePaths{c.sharedReads, c.pushedReads, c.cmaReads,
                          c.sharedBytes, c.pushedBytes, c.cmaBytes};
}

}  // namespace rpcjob::runtime
