#include "lane.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <random>

#include "host_memory/peer_memfd.h"
#include "rpcjob/metrics/tick_clock.h"

namespace rpcjob::runtime::lane {
namespace {

// Each on a cache line of its own: a caller sending and the poller receiving
// count at once, on two cores.
struct alignas(kCacheLine) Counter {
  std::atomic<uint64_t> value{0};
};
Counter gLanesUp, gLanesDeclined, gLanesFailed, gFramesSent, gFramesReceived;

// The lane whose frames this thread delivers now (Lane::poll), and whether it
// sent frames on that lane that wait for the turn's end.
thread_local Lane* tTurn = nullptr;
thread_local bool tHeld = false;
thread_local std::chrono::steady_clock::time_point tHeldSince;

// How long a turn's first held answer may wait for the turn's end: the turn
// runs inline functions, which are meant to be short but may not be.
constexpr std::chrono::microseconds kMaxHold{20};

// When the turn next reads the clock, in the CPU's time-stamp counter: reading
// the clock after every frame was 11 % of a server poller's time in an async
// burst on the GPU host (clock_gettime in a VM), and the counter costs a few
// nanoseconds. The counter runs at 1 GHz or faster on any x86-64 server, so
// N ticks take at most N ns: a check planned that many ticks ahead, for at most
// the time left to kMaxHold, comes no later than the bound.
thread_local uint64_t tNextCheck = 0;
constexpr uint64_t kCheckTicks = 10000;  // at most 10 us, under kMaxHold
static_assert(kCheckTicks <= 20000, "a first check within kMaxHold at 1 GHz");

#if defined(__x86_64__)
constexpr bool kCounter = true;
#else
constexpr bool kCounter = false;  // none assumed: every frame reads the clock
#endif
// The event clock's counter (tick_clock.h), so that counterBeforeFrame's value
// means the same to eventClockAt.
uint64_t ticksNow() {
  return metrics::tick_clock::nowTsc();
}

// The counter as the last hold check read it, after the frame before this
// one; taken once by counterBeforeFrame() (lane.h).
thread_local uint64_t tCheckTicks = 0;
thread_local bool tCheckFresh = false;

// Whether the turn's held frames waited kMaxHold; plans the next check if not.
bool heldTooLong() {
  if (kCounter) {
    tCheckTicks = ticksNow();
    tCheckFresh = true;
    if (tCheckTicks < tNextCheck) return false;
  }
  const auto held = std::chrono::steady_clock::now() - tHeldSince;
  if (held >= kMaxHold) return true;
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(kMaxHold - held).count();
  tNextCheck = ticksNow() + std::min<uint64_t>(kCheckTicks, static_cast<uint64_t>(left));
  return false;
}

// RPCJOB_LANE_HOLD=0: a turn holds nothing (to measure what holding saves).
bool holdTurns() {
  static const bool on = [] {
    const char* v = std::getenv("RPCJOB_LANE_HOLD");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// "key=value;" pairs, values decimal. Pure.
// The value text of field `key`, or none when the text has no such field.
std::optional<std::string> fieldValue(const std::string& text, const char* key) {
  const std::string k = std::string(key) + "=";
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find(';', at);
    if (end == std::string::npos) return std::nullopt;
    if (text.compare(at, k.size(), k) == 0) return text.substr(at + k.size(), end - at - k.size());
    at = end + 1;
  }
  return std::nullopt;
}

// False for an absent field and for a malformed one alike.
bool readField(const std::string& text, const char* key, uint64_t& out) {
  const std::optional<std::string> digits = fieldValue(text, key);
  if (!digits || digits->empty() || digits->size() > 20) return false;
  uint64_t v = 0;
  for (char c : *digits) {
    if (c < '0' || c > '9') return false;
    const uint64_t next = v * 10 + static_cast<uint64_t>(c - '0');
    if (next / 10 != v) return false;  // overflow
    v = next;
  }
  out = v;
  return true;
}

uint64_t ringBytes(uint64_t capacity) {
  return kControlBytes + 2 * capacity;
}

}  // namespace

std::string laneName(uint64_t token) {
  return "rpcjob-lane-" + hex(token);
}
std::string bellName(uint64_t token) {
  return "rpcjob-lane-bell-" + hex(token);
}

uint64_t randomToken() {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::atomic<uint64_t> counter{0};
  return rng() ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
}

std::string encodeOffer(const LaneOffer& o) {
  auto field = [](const char* k, uint64_t v) {
    return std::string(k) + "=" + std::to_string(v) + ";";
  };
  return field("pid", static_cast<uint64_t>(o.pid)) + field("fd", static_cast<uint64_t>(o.fd + 1)) +
         field("token", o.token) + field("capacity", o.capacity) +
         field("bell_fd", static_cast<uint64_t>(o.bellFd + 1)) + field("bell_token", o.bellToken) +
         // Only when set: a peer that predates it sees the same text as before.
         (o.deviceTensors ? field("device_tensors", 1) : std::string()) +
         (o.landing ? field("landing", 1) : std::string());
}

std::string decodeOffer(const char* data, size_t size, LaneOffer& out) {
  if (size > 512) return "a lane offer of " + std::to_string(size) + " bytes";
  const std::string text(data, size);
  uint64_t pid, fd, token, capacity, bellFd, bellToken;
  if (!readField(text, "pid", pid) || !readField(text, "fd", fd) ||
      !readField(text, "token", token) || !readField(text, "capacity", capacity) ||
      !readField(text, "bell_fd", bellFd) || !readField(text, "bell_token", bellToken)) {
    return "a malformed lane offer";
  }
  uint64_t deviceTensors = 0;  // optional: older peers do not send it
  if (fieldValue(text, "device_tensors") &&
      (!readField(text, "device_tensors", deviceTensors) || deviceTensors > 1)) {
    return "a malformed lane offer";
  }
  uint64_t landing = 0;  // optional, as device_tensors
  if (fieldValue(text, "landing") && (!readField(text, "landing", landing) || landing > 1)) {
    return "a malformed lane offer";
  }
  if (pid == 0 || pid > INT32_MAX || fd > INT32_MAX || bellFd == 0 || bellFd > INT32_MAX) {
    return "a lane offer with an impossible pid or descriptor";
  }
  if (fd != 0 && !validCapacity(capacity)) {
    return "a lane offer with a capacity of " + std::to_string(capacity);
  }
  out.pid = static_cast<int64_t>(pid);
  out.fd = static_cast<int64_t>(fd) - 1;
  out.token = token;
  out.capacity = capacity;
  out.bellFd = static_cast<int64_t>(bellFd) - 1;
  out.bellToken = bellToken;
  out.deviceTensors = deviceTensors == 1;
  out.landing = landing == 1;
  return "";
}

std::unique_ptr<SharedFile> SharedFile::create(const std::string& name, uint64_t bytes,
                                               std::string& error) {
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    error = std::string("memfd_create: ") + std::strerror(errno);
    return nullptr;
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    error = std::string("cannot size or seal the lane: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    error = std::string("cannot map the lane: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<SharedFile>(new SharedFile(static_cast<char*>(p), bytes, fd));
}

std::unique_ptr<SharedFile> SharedFile::openPeer(int64_t pid, int64_t fd, const std::string& name,
                                                 uint64_t bytes, const std::string& what,
                                                 std::string& error) {
  host_memory::PeerMemfd file{pid, fd, name, 0, bytes, what, "lane"};
  uint64_t size = 0;
  const int ours = host_memory::openPeerMemfd(file, O_RDWR, size, error);
  if (ours < 0) return nullptr;
  if (size != bytes) {
    error = what + " has " + std::to_string(size) + " bytes, not " + std::to_string(bytes);
    ::close(ours);
    return nullptr;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ours, 0);
  const int e = errno;
  ::close(ours);  // the mapping keeps the file
  if (p == MAP_FAILED) {
    error = "cannot map " + what + ": " + std::strerror(e);
    return nullptr;
  }
  return std::unique_ptr<SharedFile>(new SharedFile(static_cast<char*>(p), bytes, -1));
}

SharedFile::~SharedFile() {
  ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

LaneCounters laneCounters() {
  LaneCounters c;
  c.lanesUp = gLanesUp.value.load();
  c.lanesDeclined = gLanesDeclined.value.load();
  c.lanesFailed = gLanesFailed.value.load();
  c.framesSent = gFramesSent.value.load();
  c.framesReceived = gFramesReceived.value.load();
  return c;
}
void countLaneUp() {
  gLanesUp.value++;
}
void countLaneDeclined() {
  gLanesDeclined.value++;
}

Lane::Lane(Side side, std::unique_ptr<SharedFile> file, uint64_t token, uint64_t capacity)
    : side_(side), file_(std::move(file)), token_(token), capacity_(capacity) {
  char* base = file_->base();
  auto* requests = reinterpret_cast<RingControl*>(base);
  auto* responses = reinterpret_cast<RingControl*>(base + sizeof(RingControl));
  char* requestData = base + kControlBytes;
  char* responseData = requestData + capacity;
  if (side == Side::kClient) {
    out_ = RingProducer(requests, requestData, capacity);
    in_ = RingConsumer(responses, responseData, capacity);
  } else {
    out_ = RingProducer(responses, responseData, capacity);
    in_ = RingConsumer(requests, requestData, capacity);
  }
  frame_.reserve(1024);
}

std::shared_ptr<Lane> Lane::create(uint64_t capacity, std::string& error) {
  if (!validCapacity(capacity)) {
    error = "bad lane capacity " + std::to_string(capacity);
    return nullptr;
  }
  const uint64_t token = randomToken();
  auto file = SharedFile::create(laneName(token), ringBytes(capacity), error);
  if (!file) return nullptr;
  new (file->base()) RingControl();
  new (file->base() + sizeof(RingControl)) RingControl();
  return std::shared_ptr<Lane>(new Lane(Side::kClient, std::move(file), token, capacity));
}

std::shared_ptr<Lane> Lane::open(const LaneOffer& offer, std::string& error) {
  if (!validCapacity(offer.capacity)) {
    error = "bad lane capacity " + std::to_string(offer.capacity);
    return nullptr;
  }
  const std::string what = "lane " + laneName(offer.token) + " of pid " +
                           std::to_string(offer.pid) + " (fd " + std::to_string(offer.fd) + ")";
  auto file = SharedFile::openPeer(offer.pid, offer.fd, laneName(offer.token),
                                   ringBytes(offer.capacity), what, error);
  if (!file) return nullptr;
  return std::shared_ptr<Lane>(
      new Lane(Side::kServer, std::move(file), offer.token, offer.capacity));
}

LaneOffer Lane::offer() const {
  LaneOffer o;
  o.pid = ::getpid();
  o.fd = file_->fd();
  o.token = token_;
  o.capacity = capacity_;
  return o;
}

void Lane::setReceiver(Receive receive, Broken broken) {
  receive_ = std::move(receive);
  broken_ = std::move(broken);
}

void Lane::setPeerBell(std::unique_ptr<SharedFile> bell) {
  peerBell_ = std::move(bell);
}

RingControl* Lane::incomingControl() const {
  char* base = file_->base();
  return reinterpret_cast<RingControl*>(side_ == Side::kClient ? base + sizeof(RingControl) : base);
}

void Lane::setPublisher(std::function<void()> publisher) {
  publisher_ = std::move(publisher);
}

RingProducer::Status Lane::send(const char* data, size_t size, std::string* error,
                                Publish publish) {
  if (closed()) return RingProducer::Status::kClosed;
  const bool inTurn = tTurn == this;
  if (publish == Publish::kNow && !inTurn) {
    const RingProducer::Status s = out_.tryWrite(data, size, error);
    if (s != RingProducer::Status::kOk) return s;
    ringBell(*reinterpret_cast<Bell*>(peerBell_->base()));
    gFramesSent.value.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  RingProducer::Status s = out_.append(data, size, error);
  if (s == RingProducer::Status::kFull && held_ > 0) {
    publishHeld();  // the consumer cannot make room for frames it does not see
    s = out_.append(data, size, error);
  }
  if (s != RingProducer::Status::kOk) return s;
  ++held_;
  if (inTurn && !tHeld) {
    tHeld = true;
    tHeldSince = std::chrono::steady_clock::now();
    tNextCheck = ticksNow() + kCheckTicks;  // within kMaxHold (heldTooLong)
  }
  return s;
}

void Lane::publishHeld() {
  if (held_ == 0) return;
  // Another thread's unheld send may have published them meanwhile: then
  // nobody sleeps on them, and the bell was rung.
  if (out_.publish()) ringBell(*reinterpret_cast<Bell*>(peerBell_->base()));
  gFramesSent.value.fetch_add(held_, std::memory_order_relaxed);
  held_ = 0;
}

void publishTurn() {
  if (!tHeld || tTurn == nullptr) return;
  tHeld = false;
  tTurn->publishTurnFrames();
}

void Lane::publishTurnFrames() {
  if (publisher_) {
    publisher_();
  } else {
    publishHeld();  // a lane without an owner's lock (tests): the poller sends alone
  }
}

bool heldInTurn() noexcept {
  return tHeld;
}

bool counterBeforeFrame(uint64_t& ticks) noexcept {
  if (!tCheckFresh) return false;
  tCheckFresh = false;
  ticks = tCheckTicks;
  return true;
}

int Lane::poll(int max) {
  int delivered = 0;
  tCheckFresh = false;  // read before this turn: not this turn's
  tTurn = holdTurns() ? this : nullptr;
  // Empty while frames are delivered: whatever fills it ends the turn.
  std::string error;
  while (delivered < max && !closed()) {
    const char* data;
    size_t size;
    const RingConsumer::Status s = in_.peek(&data, &size, &error);
    if (s == RingConsumer::Status::kEmpty) break;
    if (s == RingConsumer::Status::kBroken) {
      fail("the peer broke the shared-memory lane: " + error);
      break;
    }
    // A private copy: the peer may write the ring's bytes while we parse them.
    frame_.assign(data, data + size);
    const Delivery d = receive_(frame_.data(), frame_.size(), error);
    blocked_ = d == Delivery::kBlocked;
    if (blocked_) break;
    if (d == Delivery::kFailed) {
      fail("a bad frame on the shared-memory lane: " + error);
      break;
    }
    in_.consume();
    ++delivered;
    if (tHeld && heldTooLong()) {
      tHeld = false;
      publishTurnFrames();
      tCheckFresh = false;  // the publish took time of its own
    }
  }
  tTurn = nullptr;
  if (tHeld) {
    tHeld = false;
    publishTurnFrames();
  }
  if (delivered > 0) gFramesReceived.value.fetch_add(delivered, std::memory_order_relaxed);
  return delivered;
}

void Lane::fail(const std::string& why) {
  if (closed_.exchange(true)) return;
  gLanesFailed.value++;
  if (broken_) broken_(why);
}

void Lane::close() {
  closed_.store(true, std::memory_order_release);
}

}  // namespace rpcjob::runtime::lane
