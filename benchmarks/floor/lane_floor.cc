// rpcjob-lane-floor: what rpcjob's shared-memory lane rings alone carry
// between two local processes, the floor under rpcjob-bench's small-call and
// async figures once TensorPipe is out of their path (issue 22: "if a target
// cannot be reached ..., say what bounds it and by how much"). No runtime, no
// libtorch: the two rings of one lane (worker/src/lane/ring.h, 1 MiB each as
// the runtime's) in memory both processes map, and a server process that
// echoes every frame from its poll loop (copying it out first, as the runtime
// copies a frame before parsing it). Every thread busy-polls: nothing sleeps,
// so this is the rings' best case, not a fair model of the runtime's waits.
//
//   chained  one frame, then the caller itself polls for its echo; p50 and p99
//            of --calls round trips: the floor under a small call;
//   burst    one thread writes --messages frames as fast as the ring takes
//            them while another thread of the same process (the runtime's
//            lane poller) takes the echoes: messages/s, the best of --rounds;
//            the floor under rpcjob-bench's async figure (20000 calls, all in
//            flight).
//
// Frames carry --payload bytes (default 55: an async call's request, the size
// rpcjob-tp-floor documents), numbered; every echo is checked against its
// number (a wrong or missing one fails the run).
//
//   rpcjob-lane-floor [--json] [--payload N] [--calls N] [--messages N] [--rounds N]
//                     [--corrupt-echo N]
//
// --corrupt-echo (for this program's test): the server spoils its n-th echo
// (counted from 1); the run must then fail.
//
// Exit codes: 0 success, 1 a failure (a wrong echo, a broken ring, the server
// died or a round took over 30 s), 2 usage.

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "forked_parties.h"
#include "lane/ring.h"

namespace {

using rpcjob::runtime::lane::RingConsumer;
using rpcjob::runtime::lane::RingControl;
using rpcjob::runtime::lane::RingProducer;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kCapacity = uint64_t{1} << 20;  // lane.h's kDefaultCapacity
constexpr auto kRoundLimit = std::chrono::seconds(30);

// The mapping both processes share: the two rings' controls and data, and a
// stop flag for the server.
struct Shared {
  RingControl requests;
  RingControl responses;
  alignas(64) std::atomic<int> stop{0};
  alignas(64) char requestData[kCapacity];
  char responseData[kCapacity];
};

struct Config {
  bool json = false;
  long corruptEcho = 0;  // 0: none
  size_t payload = 55;
  int calls = 20000;
  int messages = 20000;
  int rounds = 3;
};

[[noreturn]] void fail(const std::string& why) {
  throw std::runtime_error(why);
}

// The server: echoes every request frame onto the response ring until told to stop.
void serve(Shared* s, long corruptEcho) {
  RingConsumer in(&s->requests, s->requestData, kCapacity);
  RingProducer out(&s->responses, s->responseData, kCapacity);
  std::vector<char> frame;
  std::string error;
  while (s->stop.load(std::memory_order_relaxed) == 0) {
    const char* data = nullptr;
    size_t size = 0;
    auto status = in.peek(&data, &size, &error);
    if (status == RingConsumer::Status::kEmpty) continue;
    if (status == RingConsumer::Status::kBroken) fail("request ring: " + error);
    frame.assign(data, data + size);
    in.consume();
    if (--corruptEcho == 0) frame[0] ^= 1;
    for (;;) {
      auto w = out.tryWrite(frame.data(), frame.size(), &error);
      if (w == RingProducer::Status::kOk) break;
      if (w != RingProducer::Status::kFull) fail("response ring: " + error);
      if (s->stop.load(std::memory_order_relaxed) != 0) return;
    }
  }
}

class Client {
 public:
  Client(Shared* s, size_t payload)
      : in_(&s->responses, s->responseData, kCapacity),
        out_(&s->requests, s->requestData, kCapacity),
        frame_(std::max<size_t>(payload, sizeof(uint64_t))) {}

  // Writes frame number `n`, spinning while the ring is full (until `deadline`,
  // or until `abandon` is set: the receiver failed).
  void send(uint64_t n, const Clock::time_point& deadline,
            const std::atomic<bool>* abandon = nullptr) {
    std::memcpy(frame_.data(), &n, sizeof n);
    std::string error;
    for (unsigned i = 0;; ++i) {
      auto w = out_.tryWrite(frame_.data(), frame_.size(), &error);
      if (w == RingProducer::Status::kOk) return;
      if (w != RingProducer::Status::kFull) fail("request ring: " + error);
      if ((i & 1023) == 0 && abandon != nullptr && abandon->load()) fail("the receiver failed");
      if ((i & 1023) == 0 && Clock::now() > deadline) fail("the request ring stayed full");
    }
  }
  // Takes the next echo, which must be frame number `n`.
  void receive(uint64_t n, const Clock::time_point& deadline) {
    std::string error;
    for (unsigned i = 0;; ++i) {
      const char* data = nullptr;
      size_t size = 0;
      auto status = in_.peek(&data, &size, &error);
      if (status == RingConsumer::Status::kFrame) {
        uint64_t got = 0;
        if (size != frame_.size()) fail("an echo of " + std::to_string(size) + " bytes");
        std::memcpy(&got, data, sizeof got);
        in_.consume();
        if (got != n) {
          fail("echo mismatch: frame " + std::to_string(got) + " where " + std::to_string(n) +
               " was due");
        }
        return;
      }
      if (status == RingConsumer::Status::kBroken) fail("response ring: " + error);
      if ((i & 1023) == 0 && Clock::now() > deadline) {
        fail("no echo of frame " + std::to_string(n));
      }
    }
  }

 private:
  RingConsumer in_;
  RingProducer out_;
  std::vector<char> frame_;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct Result {
  double chainedP50 = 0, chainedP99 = 0, burstRate = 0;
};

Result measure(Shared* s, const Config& c) {
  Client client(s, c.payload);
  uint64_t next = 0;  // frames numbered across both phases, as one lane's
  Result r;
  {
    std::vector<double> us;
    const auto deadline = Clock::now() + kRoundLimit;
    for (int i = 0; i < c.calls + 1000; ++i) {  // the first 1000: warm-up
      auto t0 = Clock::now();
      client.send(next, deadline);
      client.receive(next++, deadline);
      if (i >= 1000)
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    r.chainedP50 = percentile(us, 0.5);
    r.chainedP99 = percentile(us, 0.99);
  }
  for (int round = 0; round < c.rounds; ++round) {
    const uint64_t first = next;
    const auto deadline = Clock::now() + kRoundLimit;
    auto t0 = Clock::now();
    std::exception_ptr receiveError;
    std::atomic<bool> receiverFailed{false};
    std::thread receiver([&] {
      try {
        for (int i = 0; i < c.messages; ++i) client.receive(first + i, deadline);
      } catch (...) {
        receiveError = std::current_exception();
        receiverFailed = true;
      }
    });
    try {
      for (int i = 0; i < c.messages; ++i) client.send(first + i, deadline, &receiverFailed);
    } catch (...) {
      receiver.join();
      if (receiveError) std::rethrow_exception(receiveError);
      throw;
    }
    receiver.join();
    if (receiveError) std::rethrow_exception(receiveError);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.burstRate = std::max(r.burstRate, c.messages / seconds);
    next += c.messages;
  }
  return r;
}

bool parse(int argc, char** argv, Config& c) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto number = [&](long lo, long hi, long& out) {
      if (i + 1 >= argc) return false;
      char* end = nullptr;
      out = std::strtol(argv[++i], &end, 10);
      return *end == '\0' && out >= lo && out <= hi;
    };
    long v = 0;
    if (a == "--json") {
      c.json = true;
    } else if (a == "--payload" && number(8, 4096, v)) {
      c.payload = static_cast<size_t>(v);
    } else if (a == "--calls" && number(1, 10000000, v)) {
      c.calls = static_cast<int>(v);
    } else if (a == "--messages" && number(1, 100000000, v)) {
      c.messages = static_cast<int>(v);
    } else if (a == "--rounds" && number(1, 1000, v)) {
      c.rounds = static_cast<int>(v);
    } else if (a == "--corrupt-echo" && number(1, 1000000000, v)) {
      c.corruptEcho = v;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (!parse(argc, argv, c)) {
    std::fprintf(stderr,
                 "usage: rpcjob-lane-floor [--json] [--payload 8..4096] [--calls N] "
                 "[--messages N] [--rounds N] [--corrupt-echo N]\n");
    return 2;
  }
  auto* s = rpcjob::floor::newShared<Shared>("rpcjob-lane-floor");
  if (s == nullptr) return 1;
  const pid_t server = fork();
  if (server < 0) {
    std::perror("rpcjob-lane-floor: fork");
    return 1;
  }
  if (server == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the client
    try {
      serve(s, c.corruptEcho);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rpcjob-lane-floor: server: %s\n", e.what());
      _exit(1);
    }
    _exit(0);
  }
  int code = 0;
  Result r;
  try {
    r = measure(s, c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rpcjob-lane-floor: %s\n", e.what());
    code = 1;
  }
  s->stop.store(1);
  const pid_t children[] = {server};
  if (!rpcjob::floor::reap(children)) code = 1;
  if (code != 0) return code;
  if (c.json) {
    std::printf(
        "{\"payload_bytes\": %zu, \"chained_p50_us\": %.2f, \"chained_p99_us\": %.2f, "
        "\"burst_messages\": %d, \"burst_msgs_per_s\": %.0f, \"rounds\": %d}\n",
        c.payload, r.chainedP50, r.chainedP99, c.messages, r.burstRate, c.rounds);
  } else {
    std::printf("rpcjob's lane rings alone, %zu-byte frames, two processes, every thread polling\n",
                c.payload);
    std::printf("%-44s %10.2f us p50, %.2f us p99\n", "chained round trip, no hand-off",
                r.chainedP50, r.chainedP99);
    std::printf("%-44s %10.0f messages/s (best of %d)\n", "burst, all in flight", r.burstRate,
                c.rounds);
  }
  return 0;
}
