#pragma once
// A lane: two rings (ring.h) in one memfd that two workers on one host share,
// beside the TensorPipe pipe between them: requests from the pipe's client to
// its server, responses back. Small messages take it (RuntimeImpl decides
// which: runtime_lane.cc); everything else, and connection set-up and failure
// detection, stays on the pipe.
//
// The client creates the memfd ("rpcjob-lane-<token>", sealed against
// shrinking and growing) and offers it over the pipe (LaneOffer: its pid, the
// descriptor, the token, the rings' capacity, and its process's bell). The
// server opens it through /proc/<pid>/fd with peer_memfd.h's checks, maps it
// read-write, and answers with its own bell. Each process's Poller (poller.h)
// reads the rings it consumes; whoever publishes rings the other's bell.
//
// Layout: page 0 holds the request ring's control, then the response ring's
// (RingControl, 128 bytes each); then `capacity` bytes of request data and
// `capacity` of response data. Nothing else in the mapping is read: the offer
// says the capacity, and the file's size is checked against it.
//
// Held frames: a frame is published (the ring's head stored, the peer's bell
// rung, with the fence that takes) when it is sent, unless it is held. Frames
// the poller's thread sends on a lane while it delivers that lane's frames (a
// turn of poll(): the answers of functions served inline, or calls made in a
// future's callback) are held until the turn ends, and a batch of calls
// (Publish::kHeld) until its sender publishes them: one publish for the lot.
// On the GPU host the fence after each frame was a sixth of a busy server
// poller's time (issue 22). A turn ends as soon as the frames that were there
// are delivered, and its held answers go out once the first of them waited
// 20 us (a long inline function), or when the poller's thread waits
// (publishTurn). RPCJOB_LANE_HOLD=0: nothing is held in a turn.
//
// Thread-safety: send() and publishHeld() are called under the owner's write
// lock (one producer); poll() only on the poller's thread; close() anywhere.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "order.h"
#include "ring.h"

namespace rpcjob::runtime::lane {

inline constexpr uint64_t kDefaultCapacity = uint64_t{1} << 20;
inline constexpr uint64_t kControlBytes = 4096;

std::string laneName(uint64_t token);
std::string bellName(uint64_t token);
uint64_t randomToken();

struct LaneOffer {
  int64_t pid = 0;
  int64_t fd = -1;  // the lane's memfd (offer) or nothing (-1: an answer)
  uint64_t token = 0;
  uint64_t capacity = 0;
  int64_t bellFd = -1;  // the sender's process's bell
  uint64_t bellToken = 0;
  // The server takes CUDA tensors as IPC handles in request frames
  // (cuda_lane/); only in an answer.
  bool deviceTensors = false;
  // The client copies its CUDA tensors into buffers the server offers
  // (kLaneOffers, cuda_lane/); only in an offer.
  bool landing = false;
};
std::string encodeOffer(const LaneOffer& offer);
// "" or why the bytes are no offer. Pure.
std::string decodeOffer(const char* data, size_t size, LaneOffer& out);

// A memfd of `bytes`, sealed, mapped read-write here; or a peer's, opened and
// checked (peer_memfd.h) and mapped read-write. Unmapped and closed at the end.
class SharedFile {
 public:
  static std::unique_ptr<SharedFile> create(const std::string& name, uint64_t bytes,
                                            std::string& error);
  static std::unique_ptr<SharedFile> openPeer(int64_t pid, int64_t fd, const std::string& name,
                                              uint64_t bytes, const std::string& what,
                                              std::string& error);
  ~SharedFile();
  char* base() const { return base_; }
  int fd() const { return fd_; }

 private:
  SharedFile(char* base, uint64_t size, int fd) : base_(base), size_(size), fd_(fd) {}
  char* base_;
  uint64_t size_;
  int fd_;  // ours (create): kept open for the peer to open; -1 for a peer's
};

// Publishes what the calling thread holds in its current turn (a poller's
// thread about to wait: the frames it waits on may be among them).
void publishTurn();

// Whether the calling thread holds frames for its turn's end: true on a
// poller's thread right after a send during a turn (that frame is among them,
// and the owner's publisher will publish it), false anywhere else.
bool heldInTurn() noexcept;

// The time-stamp counter as the poller's thread read it after the frame it
// delivered last in this turn (its hold check, heldTooLong), once: the next
// frame was taken right after, so the runtime times that frame's arrival with
// it rather than reading the counter again (20-25 ns on the GPU hosts). False
// when there is none: the first frame of a turn, after a publish, without an
// x86-64 counter, or once taken.
bool counterBeforeFrame(uint64_t& ticks) noexcept;

// Process-wide, since start: what tests and rpcjob-bench read.
struct LaneCounters {
  uint64_t lanesUp = 0;        // lanes this process sends on
  uint64_t lanesDeclined = 0;  // offers that did not lead to one (either side)
  uint64_t lanesFailed = 0;    // lanes closed for a broken peer
  uint64_t framesSent = 0;
  uint64_t framesReceived = 0;
};
LaneCounters laneCounters();
void countLaneUp();
void countLaneDeclined();

class Lane {
 public:
  enum class Side { kClient, kServer };
  // Hands a frame (a private copy) to the runtime: kBlocked leaves it in the
  // ring for later; kFailed closes the lane with `error`.
  using Receive = std::function<Delivery(const char* data, size_t size, std::string& error)>;
  using Broken = std::function<void(const std::string& why)>;

  static std::shared_ptr<Lane> create(uint64_t capacity, std::string& error);
  static std::shared_ptr<Lane> open(const LaneOffer& offer, std::string& error);

  Side side() const { return side_; }
  LaneOffer offer() const;  // without the bell (the caller's)
  // Set before the poller sees the lane.
  void setReceiver(Receive receive, Broken broken);
  // The peer's bell, rung after each frame sent.
  void setPeerBell(std::unique_ptr<SharedFile> bell);

  // Sends one frame if the ring has room now (never waits: the poller may be
  // the sender, and two full rings would wait on each other). kOk counted.
  // kHeld, or a send during this lane's turn on its poller: the frame waits
  // for publishHeld() (a full ring publishes what it holds first).
  enum class Publish { kNow, kHeld };
  RingProducer::Status send(const char* data, size_t size, std::string* error,
                            Publish publish = Publish::kNow);
  // Publishes held frames and rings the peer's bell.
  void publishHeld();
  // How the poller has the owner publish a turn's held frames: it takes its
  // write lock and calls publishHeld(). Set before the poller sees the lane.
  void setPublisher(std::function<void()> publisher);
  bool canSend() const { return peerBell_ != nullptr && !closed(); }
  uint64_t maxFrame() const { return out_.maxFrame(); }

  // The poller: delivers up to `max` frames; how many. A broken ring or a
  // failed delivery closes the lane and calls `broken` once.
  int poll(int max);
  bool hasData() const { return !closed() && in_.hasData(); }
  // Its next frame waits for the pipe (Order): whose dispatch rings the poller.
  bool blocked() const { return blocked_; }

  void close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // Tests: the shared control of the ring this side consumes.
  RingControl* incomingControl() const;

 private:
  Lane(Side side, std::unique_ptr<SharedFile> file, uint64_t token, uint64_t capacity);
  void fail(const std::string& why);
  // The turn's held frames, through the owner's lock (publisher_).
  void publishTurnFrames();
  friend void publishTurn();

  // Set up before the lane is used, then only read.
  Side side_;
  std::unique_ptr<SharedFile> file_;
  uint64_t token_;
  uint64_t capacity_;
  std::unique_ptr<SharedFile> peerBell_;
  Receive receive_;
  Broken broken_;
  std::function<void()> publisher_;
  std::atomic<bool> closed_{false};  // written once
  // The sender's (under its write lock) and the poller's, each on cache lines
  // of their own: in one object, a caller's send and its process's poller
  // moved one line between their cores on every frame (issue 22's async rate).
  alignas(kCacheLine) RingProducer out_;
  uint64_t held_ = 0;  // frames in out_ not yet published (under the write lock)
  alignas(kCacheLine) RingConsumer in_;
  bool blocked_ = false;     // the poller's
  std::vector<char> frame_;  // the frame being delivered, copied out of the ring
};

}  // namespace rpcjob::runtime::lane
