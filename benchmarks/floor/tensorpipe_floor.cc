// rpcjob-tp-floor: what TensorPipe alone costs between two local processes, the
// floor under rpcjob's CPU figures (issue 22: "if a target cannot be reached
// with TensorPipe's transports, say what bounds it and by how much"). This
// program spawns itself as the server; one pipe joins the two (echo_link.h: shm
// transport, listener on shm:// and uv as the runtime's), and the server
// echoes every message back from inside its read callback. After a warm-up
// each, on the same pipe:
//
//   chained    round trips whose next write is issued from the client's read
//              callback: the transport's own floor, no thread hand-off;
//   blocking   a user thread writes, then waits (yield spin, then a condition
//              variable, as rpcjob's Future::wait) until the echo's read
//              callback wakes it: what a synchronous rpcSync pays at least;
//   pipelined  one user thread keeps --window messages in flight; messages/s;
//   burst      the same with every message in flight at once (the window is
//              the count): how rpcjob-bench's async figure is measured
//              (worker/tools/pair_bench.cc: 20000 rpcAsync, then every
//              future's value; the best of 3 rounds);
//   4mb        a 4 MiB CPU tensor round trip (the size of rpcjob-bench's: one
//              million float32), p50, over the cma channel (when viable) and,
//              on a second pipe, over basic.
//
// Small messages: --payload bytes of metadata, no payloads, no tensors. The
// default, 69, is what rpcjob's small call puts on the wire: rpcSync of the
// built-in rpcjob.echo with a one-element float tensor travels as a 69-byte
// TensorPipe metadata (header_codec.h: 18 bytes fixed, the function name 2 +
// 11, the empty error 4; the inline payload 4 + 30: fast-value magic and
// version 2, a tuple of one 5, the inline tensor 23 = tag, dtype, ndim, one
// size 8, byte count 8, 4 bytes), measured with makeMessage() on this commit;
// its response is 53 bytes and an async call's request (an int) 55. An echo
// sends the same bytes back, so both directions carry 69 here.
//
// Every echo is checked against what was sent (each message's bytes differ
// from the last one's; tensors compared whole, outside the timed span): a
// mismatch ends the run with exit code 1.
//
//   rpcjob-tp-floor [--json] [--quick] [--payload N] [--calls N] [--messages N]
//                   [--window W] [--rounds N] [--iterations N] [--tensor-bytes N]
//                   [--corrupt-echo N|tensor]
//
// --corrupt-echo (for this program's test): the server flips one byte of its
// n-th echo, or of the first tensor it echoes; the run must then fail.
// Exit codes: 0 success, 1 a failure (TensorPipe error, timeout, wrong echo),
// 2 usage.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "echo_link.h"

namespace {

using Clock = std::chrono::steady_clock;
using rpcjob::tpfloor::EchoLink;

constexpr double kWaitSeconds = 60;  // for any one echo or round

struct Config {
  bool json = false;
  size_t payload = 69;  // rpcjob's small call (above)
  int calls = 2000;     // as rpcjob-worker bench's small calls
  int warmupCalls = 200;
  int messages = 20000;  // as its async calls
  int window = 64;
  int rounds = 3;
  int iterations = 20;                   // as its 4 MB round trips
  size_t tensorBytes = size_t{1} << 22;  // 4 MiB: at::ones({1 << 20}) of float32
  rpcjob::tpfloor::Corruption corruption;
  std::vector<std::string> serverArgs;  // --corrupt-echo, passed on

  void quick() {
    calls = 200;
    warmupCalls = 50;
    messages = 2000;
    iterations = 5;
  }
};

struct Results {
  std::string transport;
  std::string cma = "not viable on this host";
  size_t chainedCalls = 0, blockingCalls = 0;
  double chainedP50 = 0, chainedP99 = 0, blockingP50 = 0, blockingP99 = 0;
  size_t pipelinedMessages = 0, burstMessages = 0;
  double pipelinedRate = 0, burstRate = 0;
  size_t cmaIterations = 0, basicIterations = 0;
  double cmaMs = -1, basicMs = -1;  // -1: not measured
  uint64_t echoesVerified = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Small messages: a fixed pattern whose first (up to) 8 bytes are the
// message's sequence number, so an echo of any other message is caught.
class Messages {
 public:
  explicit Messages(size_t bytes) : pattern_(bytes, '\0') {
    for (size_t i = 0; i < bytes; ++i) pattern_[i] = static_cast<char>((i * 31 + 7) & 0xff);
  }
  std::string make(uint64_t seq) const {
    std::string m = pattern_;
    std::memcpy(m.data(), &seq, std::min(sizeof(seq), m.size()));
    return m;
  }
  bool matches(const std::string& m, uint64_t seq) const {
    if (m.size() != pattern_.size()) return false;
    const size_t head = std::min(sizeof(seq), m.size());
    return std::memcmp(m.data(), &seq, head) == 0 &&
           std::memcmp(m.data() + head, pattern_.data() + head, m.size() - head) == 0;
  }

 private:
  std::string pattern_;
};

// One pipe's measurements. Sequence numbers run on across all of them.
class Client {
 public:
  Client(EchoLink& link, const Messages& messages, uint64_t& verified)
      : link_(link), messages_(messages), verified_(verified) {
    idle();
  }

  // Round trips (us) of `n` messages, each written from the previous one's
  // read callback.
  std::vector<double> chained(int n) {
    std::vector<double> us;
    us.reserve(n);
    std::atomic<bool> done{false};
    Clock::time_point start;
    uint64_t seq = next_;
    const uint64_t last = next_ + n - 1;
    next_ += n;
    link_.onResponse([&](std::string echo) {
      const auto now = Clock::now();
      if (!messages_.matches(echo, seq)) return link_.fail(mismatch(seq));
      ++verified_;
      us.push_back(std::chrono::duration<double, std::micro>(now - start).count());
      if (seq == last) {
        done.store(true);
        link_.signal().notify();
        return;
      }
      std::string message = messages_.make(++seq);
      start = Clock::now();
      link_.write(std::move(message));
    });
    std::string first = messages_.make(seq);
    start = Clock::now();
    link_.write(std::move(first));
    await([&] { return done.load(); }, "a chain of echoes");
    idle();
    return us;
  }

  // Round trips (us) of `n` messages, each written by this thread, which then
  // waits for its echo.
  std::vector<double> blocking(int n) {
    std::vector<double> us;
    us.reserve(n);
    std::atomic<uint64_t> received{0};
    uint64_t expect = 0;
    link_.onResponse([&](std::string echo) {
      if (!messages_.matches(echo, expect)) return link_.fail(mismatch(expect));
      ++verified_;
      received.fetch_add(1);
      link_.signal().notify();
    });
    for (int i = 0; i < n; ++i) {
      expect = next_++;
      std::string message = messages_.make(expect);
      const auto start = Clock::now();
      link_.write(std::move(message));
      await([&] { return received.load() == static_cast<uint64_t>(i) + 1; }, "an echo");
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    idle();
    return us;
  }

  // Messages per second of `n` messages with at most `window` in flight;
  // `completed` gets how many were echoed.
  double pipelined(int n, int window, size_t& completed) {
    std::atomic<uint64_t> done{0};
    const uint64_t base = next_;
    next_ += n;
    link_.onResponse([&](std::string echo) {
      const uint64_t seq = base + done.load(std::memory_order_relaxed);
      if (!messages_.matches(echo, seq)) return link_.fail(mismatch(seq));
      ++verified_;
      done.fetch_add(1);
      link_.signal().notify();
    });
    const auto start = Clock::now();
    for (int sent = 0; sent < n; ++sent) {
      if (sent - static_cast<int64_t>(done.load()) >= window) {
        await([&] { return sent - static_cast<int64_t>(done.load()) < window; }, "a window");
      }
      link_.write(messages_.make(base + sent));
    }
    await([&] { return done.load() == static_cast<uint64_t>(n); }, "a round of echoes");
    const double rate = n / secondsSince(start);
    completed = done.load();
    idle();
    return rate;
  }

  // Median round trip (ms) of a `bytes` tensor; this thread writes and waits.
  double tensorRtt(size_t bytes, int warmup, int n, size_t& measured) {
    std::unique_ptr<char[]> send(new char[bytes]), receive(new char[bytes]);
    for (size_t i = 0; i < bytes; ++i) send[i] = static_cast<char>((i * 131 + 17) & 0xff);
    std::memset(receive.get(), 0, bytes);  // touched: no page faults in the timed part
    link_.receiveInto(receive.get(), bytes);
    std::atomic<uint64_t> received{0};
    uint64_t expect = 0;
    link_.onResponse([&](std::string echo) {
      if (!messages_.matches(echo, expect)) return link_.fail(mismatch(expect));
      received.fetch_add(1);
      link_.signal().notify();
    });
    std::vector<double> ms;
    for (int i = 0; i < warmup + n; ++i) {
      expect = next_++;
      // The sequence number in the tensor too: a stale receive buffer fails.
      std::memcpy(send.get(), &expect, std::min(sizeof(expect), bytes));
      std::string header = messages_.make(expect);
      const auto start = Clock::now();
      link_.write(std::move(header), send.get(), bytes);
      await([&] { return received.load() == static_cast<uint64_t>(i) + 1; }, "a tensor's echo");
      const double took = secondsSince(start) * 1e3;
      if (std::memcmp(send.get(), receive.get(), bytes) != 0) {
        stop("echo mismatch: the " + std::to_string(bytes) + "-byte tensor of message " +
             std::to_string(expect) + " came back different");
      }
      ++verified_;
      std::memset(receive.get(), 0, std::min(sizeof(expect), bytes));
      if (i >= warmup) ms.push_back(took);
    }
    link_.receiveInto(nullptr, 0);
    idle();
    measured = ms.size();
    return percentile(ms, 0.5);
  }

 private:
  static std::string mismatch(uint64_t seq) {
    return "echo mismatch: message " + std::to_string(seq) + " came back different";
  }
  // Between measurements nothing is in flight: an echo then is an error (and
  // the handlers of the last measurement, which point into its stack, are gone).
  void idle() {
    link_.onResponse([this](std::string) { link_.fail("an echo of a message never sent"); });
  }
  // Ends the run: the link closes first, so that no callback of TensorPipe's
  // still runs a handler whose measurement's stack is unwinding.
  [[noreturn]] void stop(const std::string& why) {
    link_.close();
    throw std::runtime_error(why);
  }
  void await(const std::function<bool()>& done, const char* what) {
    const bool ok = link_.signal().wait([&] { return link_.failed() || done(); }, kWaitSeconds);
    if (link_.failed()) stop(link_.error());
    if (!ok) {
      stop(std::string("no end of ") + what + " within " +
           std::to_string(static_cast<int>(kWaitSeconds)) + " s");
    }
  }

  EchoLink& link_;
  const Messages& messages_;
  uint64_t& verified_;
  uint64_t next_ = 1;
};

double bestRate(Client& client, int n, int window, int rounds, size_t& completed) {
  client.pipelined(n, window, completed);  // warm-up
  double best = 0;
  for (int r = 0; r < rounds; ++r) best = std::max(best, client.pipelined(n, window, completed));
  return best;
}

Results measure(const Config& config, const std::string& self) {
  Results r;
  const Messages messages(config.payload);
  {
    EchoLink link(self, {"cma", "basic"}, config.serverArgs);
    Client client(link, messages, r.echoesVerified);
    r.transport = link.registered().transport;
    client.chained(config.warmupCalls);
    std::vector<double> us = client.chained(config.calls);
    r.chainedCalls = us.size();
    r.chainedP50 = percentile(us, 0.5);
    r.chainedP99 = percentile(us, 0.99);
    client.blocking(config.warmupCalls);
    us = client.blocking(config.calls);
    r.blockingCalls = us.size();
    r.blockingP50 = percentile(us, 0.5);
    r.blockingP99 = percentile(us, 0.99);
    r.pipelinedRate =
        bestRate(client, config.messages, config.window, config.rounds, r.pipelinedMessages);
    r.burstRate =
        bestRate(client, config.messages, config.messages, config.rounds, r.burstMessages);
    const auto& channels = link.registered().channels;
    if (std::find(channels.begin(), channels.end(), "cma") != channels.end()) {
      r.cma = "viable";
      r.cmaMs = client.tensorRtt(config.tensorBytes, 3, config.iterations, r.cmaIterations);
    }
    const std::string closed = link.close();
    if (!closed.empty()) throw std::runtime_error(closed);
  }
  {
    // A second pipe with basic alone: TensorPipe has no per-message channel
    // choice. One pipe at a time, so one shm reactor per process, as rpcjob's.
    EchoLink link(self, {"basic"}, config.serverArgs);
    Client client(link, messages, r.echoesVerified);
    r.basicMs = client.tensorRtt(config.tensorBytes, 3, config.iterations, r.basicIterations);
    const std::string closed = link.close();
    if (!closed.empty()) throw std::runtime_error(closed);
  }
  return r;
}

std::string number(double v, int decimals) {
  if (v < 0) return "null";
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, v);
  return text;
}

void printJson(const Config& c, const Results& r) {
  std::printf(
      "{\"payload_bytes\": %zu, \"transport\": \"%s\", \"chained_calls\": %zu, "
      "\"chained_p50_us\": %s, \"chained_p99_us\": %s, \"blocking_calls\": %zu, "
      "\"blocking_p50_us\": %s, \"blocking_p99_us\": %s, \"pipelined_window\": %d, "
      "\"pipelined_messages\": %zu, \"pipelined_msgs_per_s\": %s, \"burst_messages\": %zu, "
      "\"burst_msgs_per_s\": %s, \"rounds\": %d, \"tensor_bytes\": %zu, \"cma\": \"%s\", "
      "\"tensor_cma_iterations\": %zu, \"tensor_cma_ms\": %s, "
      "\"tensor_basic_iterations\": %zu, \"tensor_basic_ms\": %s, "
      "\"echoes_verified\": %llu}\n",
      c.payload, r.transport.c_str(), r.chainedCalls, number(r.chainedP50, 2).c_str(),
      number(r.chainedP99, 2).c_str(), r.blockingCalls, number(r.blockingP50, 2).c_str(),
      number(r.blockingP99, 2).c_str(), c.window, r.pipelinedMessages,
      number(r.pipelinedRate, 0).c_str(), r.burstMessages, number(r.burstRate, 0).c_str(), c.rounds,
      c.tensorBytes, r.cma.c_str(), r.cmaIterations, number(r.cmaMs, 3).c_str(), r.basicIterations,
      number(r.basicMs, 3).c_str(), static_cast<unsigned long long>(r.echoesVerified));
}

void printTable(const Config& c, const Results& r) {
  std::printf(
      "TensorPipe alone: 2 local processes, one pipe over %s, the server echoing from\n"
      "its read callback; %zu-byte messages (rpcjob's small call), every echo checked\n\n",
      r.transport.c_str(), c.payload);
  std::printf("%-44s %12s %12s\n", "measurement", "p50", "p99");
  std::printf("%-44s %12.2f %12.2f\n", "chained round trip (us), no hand-off", r.chainedP50,
              r.chainedP99);
  std::printf("%-44s %12.2f %12.2f\n", "blocking round trip (us), a thread waits", r.blockingP50,
              r.blockingP99);
  std::printf("%-44s %12s\n", "", "messages/s");
  char label[96];
  std::snprintf(label, sizeof(label), "pipelined, %d in flight (best of %d)", c.window, c.rounds);
  std::printf("%-44s %12.0f\n", label, r.pipelinedRate);
  std::snprintf(label, sizeof(label), "burst, all %d in flight (best of %d)", c.messages, c.rounds);
  std::printf("%-44s %12.0f\n", label, r.burstRate);
  std::printf("%-44s %12s\n", "", "p50 (ms)");
  std::snprintf(label, sizeof(label), "%zu-byte tensor round trip, cma", c.tensorBytes);
  if (r.cmaMs >= 0) {
    std::printf("%-44s %12.3f\n", label, r.cmaMs);
  } else {
    std::printf("%-44s %12s (cma %s)\n", label, "-", r.cma.c_str());
  }
  std::snprintf(label, sizeof(label), "%zu-byte tensor round trip, basic", c.tensorBytes);
  std::printf("%-44s %12.3f\n", label, r.basicMs);
}

bool positive(const char* text, long& out) {
  char* end = nullptr;
  out = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && out > 0;
}

int usage() {
  std::cerr << "usage: rpcjob-tp-floor [--json] [--quick] [--payload N] [--calls N] "
               "[--messages N] [--window W] [--rounds N] [--iterations N] [--tensor-bytes N] "
               "[--corrupt-echo N|tensor]\n";
  return 2;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  std::string serveChannels;
  bool serving = false;
  // --quick first, so that explicit counts override it wherever they stand.
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) config.quick();
  }
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool hasValue = i + 1 < argc;
    long v = 0;
    if (arg == "--json") {
      config.json = true;
    } else if (arg == "--quick") {
    } else if (arg == "--serve" && hasValue) {  // the server's role (internal)
      serving = true;
      serveChannels = argv[++i];
    } else if (arg == "--corrupt-echo" && hasValue) {
      const std::string what = argv[++i];
      if (what == "tensor") {
        config.corruption.tensor = true;
      } else if (positive(what.c_str(), v)) {
        config.corruption.message = v;
      } else {
        return usage();
      }
      config.serverArgs = {"--corrupt-echo", what};
    } else if (hasValue && positive(argv[i + 1], v) &&
               (arg == "--payload" || arg == "--calls" || arg == "--messages" ||
                arg == "--window" || arg == "--rounds" || arg == "--iterations" ||
                arg == "--tensor-bytes")) {
      ++i;
      if (arg == "--payload") config.payload = static_cast<size_t>(v);
      if (arg == "--calls") config.calls = static_cast<int>(v);
      if (arg == "--messages") config.messages = static_cast<int>(v);
      if (arg == "--window") config.window = static_cast<int>(v);
      if (arg == "--rounds") config.rounds = static_cast<int>(v);
      if (arg == "--iterations") config.iterations = static_cast<int>(v);
      if (arg == "--tensor-bytes") config.tensorBytes = static_cast<size_t>(v);
    } else {
      return usage();
    }
  }
  if (serving) {
    try {
      return rpcjob::tpfloor::serve(split(serveChannels), config.corruption);
    } catch (const std::exception& e) {
      std::cerr << "rpcjob-tp-floor (server): " << e.what() << "\n";
      return 1;
    }
  }
  char self[4096];
  const ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    std::cerr << "rpcjob-tp-floor: cannot find its own binary (/proc/self/exe)\n";
    return 1;
  }
  self[length] = '\0';
  Results results;
  try {
    results = measure(config, self);
  } catch (const std::exception& e) {
    std::cerr << "rpcjob-tp-floor: " << e.what() << "\n";
    return 1;
  }
  if (config.json) {
    printJson(config, results);
  } else {
    printTable(config, results);
  }
  return 0;
}
