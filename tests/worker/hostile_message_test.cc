// A hostile peer against a real worker process: each case opens its own
// TensorPipe pipe to w1 and writes one message that TensorPipe delivers but
// rpcjob must refuse (prepareRead in worker/src/serialization.cc): a tensor too
// large to allocate, a length that contradicts the shape, an unknown dtype, a
// header that does not decode. The worker must log why, answer the call with a
// "refused" error that says why when the header could be read (the caller then
// closes the pipe; the worker does after a grace period otherwise) or else close
// the pipe at once, never crash or hang, keep answering the driver and exit
// cleanly at shutdown.
//
// The same for the shared-memory lane beside such a pipe (lane/lane.h), which
// the cases open by hand as the runtime's client does (offerLane): a frame with
// CUDA tensors as IPC handles (wire::kDeviceHandles) to a worker without a CUDA
// build is refused with the reason. And the other way round, a hostile
// server: a fake "w1" that answers a runtime in this process (its client) with
// a copy answer (wire::kLaneCopied) for tensors that client never lent it.
#include <ATen/core/ivalue.h>
#include <ATen/ops/ones.h>
#include <c10/core/ScalarType.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <tensorpipe/tensorpipe.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cluster.h"
#include "cuda/device_maps.h"
#include "cuda_lane/handles_wire.h"
#include "header_codec.h"
#include "lane/lane.h"
#include "memory_limit.h"
#include "raw_peer.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/port_reservation.h"

namespace rpcjob::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kBound{10};  // every wait in this file
// How long w1 keeps a pipe open after refusing a message on it, for the caller
// to read the answer and close it (RuntimeImpl::kRefusedPipeGrace).
constexpr std::chrono::seconds kRefusedPipeGrace{10};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A tensor entry as the runtime writes one: rpcjob's metadata announcing
// `dtype` and `sizes`, and `length` bytes at `data`.
tensorpipe::Message::Tensor tensorEntry(c10::ScalarType dtype, std::vector<int64_t> sizes,
                                        const void* data, size_t length) {
  wire::TensorMeta meta;
  meta.dtype = static_cast<int8_t>(dtype);
  meta.sizes = std::move(sizes);
  tensorpipe::Message::Tensor t;
  t.buffer = tensorpipe::CpuBuffer{const_cast<void*>(data)};
  t.length = length;
  t.metadata = wire::encodeTensorMeta(meta);
  return t;
}

// One message read off a raw pipe: its header and its payload (inline, or
// TensorPipe's first), or why the read failed.
struct RawMessage {
  std::string error;
  wire::Header header;
  std::string payload;
};

// Reads the next message on `pipe` (its tensors too, into buffers dropped after)
// and hands it to `done` on TensorPipe's thread.
void readRaw(const std::shared_ptr<tensorpipe::Pipe>& pipe, std::function<void(RawMessage)> done) {
  pipe->readDescriptor(
      [pipe, done = std::move(done)](const tensorpipe::Error& error, tensorpipe::Descriptor d) {
        auto m = std::make_shared<RawMessage>();
        if (error) {
          m->error = error.what();
          return done(std::move(*m));
        }
        m->error = wire::decodeHeader(d.metadata.data(), d.metadata.size(), m->header);
        if (m->error.empty() && m->header.inlinePayload) {
          m->payload = d.metadata.substr(m->header.payloadOffset, m->header.payloadLength);
        }
        auto buffers = std::make_shared<std::vector<std::string>>();
        for (const auto& p : d.payloads) buffers->emplace_back(p.length, '\0');
        for (const auto& t : d.tensors) buffers->emplace_back(t.length, '\0');
        tensorpipe::Allocation allocation;
        for (size_t i = 0; i < buffers->size(); ++i) {
          if (i < d.payloads.size()) {
            allocation.payloads.push_back({(*buffers)[i].data()});
          } else {
            allocation.tensors.push_back({tensorpipe::CpuBuffer{(*buffers)[i].data()}});
          }
        }
        const bool hasPayload = !d.payloads.empty();
        pipe->read(std::move(allocation),
                   [m, buffers, hasPayload, done](const tensorpipe::Error& error) {
                     if (error) m->error = error.what();
                     if (!error && hasPayload) m->payload = buffers->front();
                     done(std::move(*m));
                   });
      });
}

// A message as the runtime writes one: the header, `payload` inline after it.
tensorpipe::Message rawMessage(const wire::Header& header, const std::string& payload = {}) {
  tensorpipe::Message m;
  m.metadata = wire::encodeHeader(header);
  if (!payload.empty()) wire::appendInlinePayload(m.metadata, payload.data(), payload.size());
  return m;
}

// The arguments (7) of a call, as the runtime encodes them.
std::string argumentsSeven() {
  std::vector<char> bytes;
  wire::FastEncoder args(bytes);
  args.tuple(1);
  args.integer(7);
  return {bytes.begin(), bytes.end()};
}

// A lane's end that this process offers (the client's) or opened (the
// server's), with this process's bell for the peer to ring, as the runtime
// makes them (offerLane, onLaneOffer); never polled unless a case does.
struct RawLane {
  std::shared_ptr<runtime::lane::Lane> lane;
  uint64_t bellToken = runtime::lane::randomToken();
  std::unique_ptr<runtime::lane::SharedFile> bell;
  // Our side of the offer: the lane (a client's) and our bell.
  runtime::lane::LaneOffer offer() const {
    runtime::lane::LaneOffer o;
    if (lane->side() == runtime::lane::Lane::Side::kClient) o = lane->offer();
    o.pid = ::getpid();
    o.bellFd = bell->fd();
    o.bellToken = bellToken;
    return o;
  }
  // Opens the bell the peer's offer (or answer) names: "" or why not.
  std::string ringing(const runtime::lane::LaneOffer& peer) {
    std::string why;
    auto file = runtime::lane::SharedFile::openPeer(peer.pid, peer.bellFd,
                                                    runtime::lane::bellName(peer.bellToken), 4096,
                                                    "the peer's bell", why);
    if (file) lane->setPeerBell(std::move(file));
    return why;
  }
  std::string makeBell() {
    std::string why;
    bell = runtime::lane::SharedFile::create(runtime::lane::bellName(bellToken), 4096, why);
    return why;
  }
};

// `bytes` of address space that reads as zeros and commits no memory: the
// sender's side of a tensor too large for any machine here.
class ZeroPages {
 public:
  explicit ZeroPages(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : p;
  }
  ~ZeroPages() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  ZeroPages(const ZeroPages&) = delete;
  ZeroPages& operator=(const ZeroPages&) = delete;
  const void* data() const { return data_; }

 private:
  size_t bytes_;
  void* data_;
};

// Whether this machine refuses one allocation of `bytes` (so the worker's
// at::empty throws): not with overcommit_memory=1, nor with more RAM and swap.
bool allocationRefused(uint64_t bytes) {
  int overcommit = 0;
  std::ifstream("/proc/sys/vm/overcommit_memory") >> overcommit;
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return false;
  uint64_t memory = (uint64_t{info.totalram} + info.totalswap) * info.mem_unit;
  return overcommit != 1 && memory < bytes;
}

// ASan's and TSan's allocators abort the process on a request this large
// (CONTRIBUTING.md's sanitizer builds) unless told to return null instead.
bool sanitizerAbortsOnHugeAllocations() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  for (const char* name : {"ASAN_OPTIONS", "TSAN_OPTIONS"}) {
    const char* options = std::getenv(name);
    if (options != nullptr && std::strstr(options, "allocator_may_return_null=1") != nullptr) {
      return false;
    }
  }
  return true;
#else
  return false;
#endif
}

class HostileMessageTest : public ::testing::Test {
 protected:
  // What became of one message on a fresh pipe.
  struct Outcome {
    bool hung = false;                   // no answer, no close, or no write callback in time
    std::string closedWith;              // our read failed (the worker closed the pipe): why
    std::optional<wire::Header> answer;  // the worker answered instead
    std::string closedAfterAnswer;       // the read after the answer failed: why
    std::string writeError;              // empty: the write went out
  };

  void SetUp() override {
    // w1's stderr goes to a file so the cases can check what it logged: fd 2
    // points there only while the cluster forks w1 (the driver keeps ours).
    log_ = ::testing::TempDir() + "hostile_message_test_XXXXXX";
    int fd = mkostemp(log_.data(), O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    // w1 reads its message limit from the environment it is forked with.
    std::vector<std::pair<std::string, std::string>> env;
    if (!maxMessageBytes_.empty()) env.emplace_back("RPCJOB_MAX_MESSAGE_BYTES", maxMessageBytes_);
    cluster_ = clusterLoggingTo(fd, env);
    context_ = rawPeerContext();
  }

  void TearDown() override {
    if (context_) {
      context_->close();
      context_->join();
    }
    if (cluster_) {
      for (int code : cluster_->shutdown()) EXPECT_EQ(code, 0) << "w1's exit code";
    }
    if (HasFailure()) std::cout << "w1's stderr:\n" << readFile(log_);
    unlink(log_.c_str());
  }

  // A call of "identity" on `tensor`, as the driver would send it: the header,
  // then the arguments (a fast payload whose one value references tensor 0).
  // The size of identityCall's payload (its arguments): part of a message's total.
  static size_t payloadBytes() {
    std::vector<char> scratch;
    wire::FastEncoder args(scratch);
    args.tuple(1);
    args.tensorRef(0);
    return scratch.size();
  }

  tensorpipe::Message identityCall(tensorpipe::Message::Tensor tensor) {
    wire::Header header;
    header.type = wire::MessageType::kCall;
    header.id = 1;
    header.function = "identity";
    payload_.clear();
    wire::FastEncoder args(payload_);
    args.tuple(1);
    args.tensorRef(0);
    tensorpipe::Message m;
    m.metadata = wire::encodeHeader(header);
    m.payloads.push_back({payload_.data(), payload_.size(), ""});
    m.tensors.push_back(std::move(tensor));
    return m;
  }

  // Opens a pipe to w1, writes `message`, and waits (bounded) until w1 answers
  // or closes the pipe, and until our write completed or failed. With
  // `untilClosed`, an answer is read (it has no payload or tensors: an error) and
  // then the next read, which fails when w1 closes the pipe: the refusal's grace
  // period, as a caller that ignores the refusal sees it.
  Outcome send(tensorpipe::Message message, bool untilClosed = false) {
    auto pipe = context_->connect("uv://127.0.0.1:" + std::to_string(cluster_->port(1)),
                                  tensorpipe::PipeOptions().remoteName("w1"));
    auto read = std::make_shared<std::promise<Outcome>>();
    auto written = std::make_shared<std::promise<std::string>>();
    auto readDone = read->get_future();
    auto writeDone = written->get_future();
    pipe->readDescriptor([read, pipe, untilClosed](const tensorpipe::Error& error,
                                                   tensorpipe::Descriptor d) {
      Outcome o;
      if (error) {
        o.closedWith = error.what();
        read->set_value(std::move(o));
        return;
      }
      wire::Header h;
      std::string bad = wire::decodeHeader(d.metadata.data(), d.metadata.size(), h);
      if (!bad.empty()) h.error = "(an undecodable answer: " + bad + ")";
      o.answer = h;
      if (!untilClosed || !d.payloads.empty() || !d.tensors.empty()) {
        read->set_value(std::move(o));
        return;
      }
      pipe->read(tensorpipe::Allocation{}, [read, pipe, o](const tensorpipe::Error& error) mutable {
        if (error) {
          o.closedAfterAnswer = error.what();
          read->set_value(std::move(o));
          return;
        }
        pipe->readDescriptor(
            [read, o](const tensorpipe::Error& error, tensorpipe::Descriptor) mutable {
              o.closedAfterAnswer = error ? error.what() : "";
              read->set_value(std::move(o));
            });
      });
    });
    pipe->write(std::move(message), [written](const tensorpipe::Error& error) {
      written->set_value(error ? error.what() : "");
    });
    Outcome outcome;
    // After the read's outcome the write settles by itself: it went out before
    // an answer, or the close fails it (it waits for the worker's descriptor
    // reply); a refused message's write waits for our close.
    if (readDone.wait_for(untilClosed ? kBound + kRefusedPipeGrace : kBound) ==
        std::future_status::ready) {
      outcome = readDone.get();
      // A write that went out completes by itself; a refused one waits on w1,
      // which will not read it, and ends when we close the pipe.
      const bool refused = outcome.answer && outcome.answer->errorKind == wire::ErrorKind::kRefused;
      if (refused || !outcome.closedWith.empty()) pipe->close();
      if (writeDone.wait_for(kBound) == std::future_status::ready) {
        outcome.writeError = writeDone.get();
        pipe->close();
        return outcome;
      }
    }
    outcome.hung = true;
    pipe->close();
    // The write points into the caller's buffers: wait for TensorPipe to let go.
    EXPECT_EQ(writeDone.wait_for(kBound), std::future_status::ready) << "close() did not end it";
    return outcome;
  }

  // w1 logged that it closed our pipe, with `reason` in the line.
  ::testing::AssertionResult workerLogged(const std::string& reason) {
    return workerLoggedLine("closing a pipe from 'hostile': " + reason);
  }

  // w1's stderr has `line` (within kBound).
  ::testing::AssertionResult workerLoggedLine(const std::string& line) {
    for (auto until = Clock::now() + kBound; Clock::now() < until;) {
      if (readFile(log_).find(line) != std::string::npos) return ::testing::AssertionSuccess();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ::testing::AssertionFailure() << "w1's stderr has no \"" << line << "\"";
  }

  ::testing::AssertionResult workerStillAnswers() {
    auto call = cluster_->driver().rpcAsync("w1", "identity", {int64_t{7}});
    if (!call.waitFor(kBound)) return ::testing::AssertionFailure() << "w1 hangs";
    if (call.hasError()) return ::testing::AssertionFailure() << call.errorMessage();
    if (call.value().toInt() != 7) return ::testing::AssertionFailure() << call.value();
    return ::testing::AssertionSuccess();
  }

  // The contract for every hostile message: a call whose header w1 could read
  // is answered with a kRefused error that says why (send() then closes the
  // pipe, as the runtime's caller side does); one whose header it could not
  // read gets the close alone.
  enum class HeaderReadable { kYes, kNo };
  void expectRefused(tensorpipe::Message message, const std::string& reason,
                     HeaderReadable header = HeaderReadable::kYes) {
    auto start = Clock::now();
    Outcome outcome = send(std::move(message));
    EXPECT_FALSE(outcome.hung) << "w1 neither answered nor closed the pipe within 10 s";
    if (header == HeaderReadable::kYes) {
      EXPECT_TRUE(outcome.answer) << "closed without an answer: " << outcome.closedWith;
      if (outcome.answer) {
        EXPECT_EQ(outcome.answer->type, wire::MessageType::kError);
        EXPECT_EQ(outcome.answer->id, 1u);
        EXPECT_EQ(outcome.answer->errorKind, wire::ErrorKind::kRefused);
        EXPECT_NE(outcome.answer->error.find("refused the message: " + reason), std::string::npos)
            << outcome.answer->error;
      }
    } else {
      EXPECT_FALSE(outcome.answer) << "w1 answered: " << outcome.answer->error;
      EXPECT_FALSE(outcome.closedWith.empty());
    }
    EXPECT_TRUE(workerLogged(reason));
    EXPECT_TRUE(workerStillAnswers());
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    EXPECT_LT(took.count(), 5000) << "ms for one refusal";
  }

  std::unique_ptr<Cluster> cluster_;
  std::shared_ptr<tensorpipe::Context> context_;
  std::string log_;
  std::string maxMessageBytes_;  // w1's RPCJOB_MAX_MESSAGE_BYTES; empty: its default
  std::vector<char> payload_;
};

// The control: a well-formed call on such a pipe is answered, so the refusals
// below are the worker's checks and not a pipe that never worked.
TEST_F(HostileMessageTest, AWellFormedCallOnTheSamePipeIsAnswered) {
  const float values[4] = {1, 2, 3, 4};
  Outcome outcome = send(identityCall(tensorEntry(c10::kFloat, {4}, values, sizeof(values))));
  ASSERT_FALSE(outcome.hung);
  ASSERT_TRUE(outcome.answer) << "closed: " << outcome.closedWith;
  EXPECT_EQ(outcome.answer->type, wire::MessageType::kResponse) << outcome.answer->error;
  EXPECT_EQ(outcome.answer->id, 1u);
  EXPECT_EQ(outcome.writeError, "");
  EXPECT_TRUE(workerStillAnswers());
}

// By default a worker takes no message larger than its memory (or its cgroup's
// limit): 1 TiB is refused before anything is allocated, on any machine with
// less, whatever its overcommit policy or sanitizer.
TEST_F(HostileMessageTest, AMessageLargerThanTheWorkersMemoryClosesThePipe) {
  const uint64_t bytes = uint64_t{1} << 40;
  if (runtime::memoryLimitBytes() >= bytes) GTEST_SKIP() << "this machine has 1 TiB or more";
  ZeroPages zeros(bytes);
  if (zeros.data() == nullptr) GTEST_SKIP() << "cannot map 1 TiB of address space here";
  expectRefused(identityCall(tensorEntry(c10::kFloat, {int64_t{1} << 38}, zeros.data(), bytes)),
                "a message of " + std::to_string(bytes + payloadBytes()) +
                    " bytes of host memory is over this worker's limit of " +
                    std::to_string(runtime::memoryLimitBytes()) + " bytes");
}

// A worker with a limit set (RPCJOB_MAX_MESSAGE_BYTES) refuses what is over it
// and takes what is not.
class HostileMessageLimitTest : public HostileMessageTest {
 protected:
  HostileMessageLimitTest() { maxMessageBytes_ = std::to_string(kLimit); }
  static constexpr uint64_t kLimit = 1 << 20;
};

TEST_F(HostileMessageLimitTest, AMessageOverTheLimitClosesThePipeAndOneUnderItIsAnswered) {
  std::vector<float> under((kLimit - payloadBytes()) / sizeof(float));
  Outcome outcome = send(identityCall(tensorEntry(c10::kFloat, {static_cast<int64_t>(under.size())},
                                                  under.data(), under.size() * sizeof(float))));
  ASSERT_TRUE(outcome.answer) << "closed: " << outcome.closedWith;
  EXPECT_EQ(outcome.answer->type, wire::MessageType::kResponse) << outcome.answer->error;

  std::vector<float> over(under.size() + 1);
  expectRefused(identityCall(tensorEntry(c10::kFloat, {static_cast<int64_t>(over.size())},
                                         over.data(), over.size() * sizeof(float))),
                "a message of " + std::to_string(payloadBytes() + over.size() * sizeof(float)) +
                    " bytes of host memory is over this worker's limit of " +
                    std::to_string(kLimit) + " bytes");
}

// A caller that ignores the refusal (and keeps the pipe open) has it closed by
// w1 after the grace period.
TEST_F(HostileMessageLimitTest, APipeWhoseCallerIgnoresTheRefusalIsClosedAfterTheGracePeriod) {
  std::vector<float> over(kLimit / sizeof(float) + 1);
  auto start = Clock::now();
  Outcome outcome = send(identityCall(tensorEntry(c10::kFloat, {static_cast<int64_t>(over.size())},
                                                  over.data(), over.size() * sizeof(float))),
                         true);
  ASSERT_TRUE(outcome.answer) << "closed without an answer: " << outcome.closedWith;
  EXPECT_EQ(outcome.answer->errorKind, wire::ErrorKind::kRefused);
  EXPECT_FALSE(outcome.closedAfterAnswer.empty()) << "w1 kept the pipe open";
  EXPECT_GE(Clock::now() - start, kRefusedPipeGrace - std::chrono::seconds(1));
  EXPECT_TRUE(workerStillAnswers());
}

// What a user sees: the driver's call with a tensor over w1's limit fails with
// the reason, not as a broken connection, and the next call reconnects.
TEST_F(HostileMessageLimitTest, ACallOverTheLimitFailsWithTheReasonAndTheNextOneWorks) {
  const int64_t floats = kLimit / sizeof(float) + 1;
  std::string message;
  try {
    cluster_->driver().rpcSync("w1", "identity", {at::ones({floats})});
    ADD_FAILURE() << "the call over the limit went through";
  } catch (const runtime::RpcError& e) {
    EXPECT_EQ(e.code(), runtime::ErrorCode::kBadMessage) << e.what();
    message = e.what();
  }
  EXPECT_NE(message.find("refused the message: a message of "), std::string::npos) << message;
  EXPECT_NE(message.find("over this worker's limit of " + std::to_string(kLimit) + " bytes"),
            std::string::npos)
      << message;
  EXPECT_TRUE(workerStillAnswers());
  auto small = cluster_->driver().rpcSync("w1", "identity", {at::ones({4})}).toTensor();
  EXPECT_EQ(small.sum().item<float>(), 4.0f);
}

// The other calls on the refused pipe fail at once, with the reason, instead of
// waiting for answers that cannot come.
TEST_F(HostileMessageLimitTest, TheOtherCallsOnARefusedPipeFailWithTheReason) {
  auto& driver = cluster_->driver();
  auto waiting = driver.rpcAsync("w1", "sleep_ms", {int64_t{3000}});
  auto start = Clock::now();
  EXPECT_THROW(driver.rpcSync("w1", "identity", {at::ones({int64_t{kLimit / sizeof(float) + 1}})}),
               runtime::RpcError);
  ASSERT_TRUE(waiting.waitFor(kBound));
  ASSERT_TRUE(waiting.hasError());
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(2500)) << "it waited for sleep_ms";
  const std::string message = waiting.errorMessage();
  EXPECT_NE(message.find("connection to worker 'w1' failed: worker 'w1' refused the message: "),
            std::string::npos)
      << message;
  EXPECT_TRUE(workerStillAnswers());
}

// Past the limit, 2^38 floats (1 TiB) pass prepareRead's length cap (2^40
// bytes) and reach the allocation, which fails: before 57b24f2 the exception
// went through TensorPipe's loop and terminated the worker.
class HostileMessageNoLimitTest : public HostileMessageTest {
 protected:
  HostileMessageNoLimitTest() { maxMessageBytes_ = std::to_string(uint64_t{1} << 42); }
};

TEST_F(HostileMessageNoLimitTest, ATensorTooLargeToAllocateClosesThePipe) {
  const uint64_t bytes = uint64_t{1} << 40;
  if (!allocationRefused(bytes)) {
    GTEST_SKIP() << "this machine may grant 1 TiB (overcommit_memory=1 or that much memory): "
                    "w1 would start receiving it";
  }
  if (sanitizerAbortsOnHugeAllocations()) {
    GTEST_SKIP() << "the sanitizer's allocator would abort w1: set allocator_may_return_null=1";
  }
  ZeroPages zeros(bytes);
  if (zeros.data() == nullptr) GTEST_SKIP() << "cannot map 1 TiB of address space here";
  expectRefused(identityCall(tensorEntry(c10::kFloat, {int64_t{1} << 38}, zeros.data(), bytes)),
                "cannot allocate the incoming message: ");
}

TEST_F(HostileMessageTest, ALengthThatContradictsTheShapeClosesThePipe) {
  const char bytes[32] = {};
  for (size_t length : {size_t{0}, size_t{8}, size_t{32}}) {  // 4 floats are 16 bytes
    SCOPED_TRACE("length " + std::to_string(length));
    expectRefused(identityCall(tensorEntry(c10::kFloat, {4}, bytes, length)),
                  "tensor length does not match its shape");
  }
}

TEST_F(HostileMessageTest, AnUnknownOrUnsupportedDtypeClosesThePipe) {
  const char bytes[16] = {};
  struct Case {
    int8_t dtype;
    std::string reason;
  };
  for (const Case& c : {Case{127, "bad tensor dtype 127"}, Case{-1, "bad tensor dtype -1"},
                        Case{static_cast<int8_t>(c10::ScalarType::Undefined), "bad tensor dtype"},
                        Case{static_cast<int8_t>(c10::kQInt8), "quantized dtype"}}) {
    SCOPED_TRACE("dtype " + std::to_string(c.dtype));
    expectRefused(
        identityCall(tensorEntry(static_cast<c10::ScalarType>(c.dtype), {4}, bytes, sizeof(bytes))),
        c.reason);
  }
}

TEST_F(HostileMessageTest, AHeaderThatDoesNotDecodeClosesThePipe) {
  const float values[4] = {1, 2, 3, 4};
  const std::string valid =
      identityCall(tensorEntry(c10::kFloat, {4}, values, sizeof(values))).metadata;
  std::string random(64, '\0');
  std::mt19937 bits(1);
  for (char& c : random) c = static_cast<char>(bits());
  std::string otherVersion = valid;
  otherVersion[2] = static_cast<char>(wire::kVersion + 1);
  for (const std::string& metadata :
       {random, valid.substr(0, valid.size() / 2), otherVersion, std::string()}) {
    SCOPED_TRACE("metadata of " + std::to_string(metadata.size()) + " bytes");
    tensorpipe::Message m = identityCall(tensorEntry(c10::kFloat, {4}, values, sizeof(values)));
    m.metadata = metadata;
    expectRefused(std::move(m), "bad header: ", HeaderReadable::kNo);
  }
}

// "identity"'s arguments (7,), as a batch part's payload.
std::vector<char> sevenAsArguments() {
  std::vector<char> args;
  wire::FastEncoder encoder(args);
  encoder.tuple(1);
  encoder.integer(7);
  return args;
}

// A kCall of "identity", id 1, its header encoded (a batch part's).
std::string identityPartHeader() {
  wire::Header part;
  part.type = wire::MessageType::kCall;
  part.id = 1;
  part.function = "identity";
  return wire::encodeHeader(part);
}

// A kBatch message of one part: `partHeader` and its payload, encoded into
// `batch`, which TensorPipe's payload points into (the caller keeps it).
tensorpipe::Message batchOfOne(std::vector<char>& batch, const std::string& partHeader,
                               const std::vector<char>& payload) {
  wire::Header batchHeader;
  batchHeader.type = wire::MessageType::kBatch;
  batch.clear();
  wire::appendBatchCount(batch, 1);
  wire::appendBatchEntry(batch, partHeader, payload.data(), payload.size());
  tensorpipe::Message m;
  m.metadata = wire::encodeHeader(batchHeader);
  m.payloads.push_back({batch.data(), batch.size(), ""});
  return m;
}

// A payload travels either inside the metadata (wire::kInlinePayload) or as
// TensorPipe's payload, never both; and a batch's parts carry theirs in the
// batch. The control: the inline form alone is answered.
TEST_F(HostileMessageTest, APayloadBothInlineAndApartOrInlineInABatchClosesThePipe) {
  const float values[4] = {1, 2, 3, 4};
  auto inlined = [&] {
    tensorpipe::Message m = identityCall(tensorEntry(c10::kFloat, {4}, values, sizeof(values)));
    wire::appendInlinePayload(m.metadata, payload_.data(), payload_.size());
    return m;
  };
  tensorpipe::Message alone = inlined();
  alone.payloads.clear();
  Outcome outcome = send(std::move(alone));
  ASSERT_FALSE(outcome.hung);
  ASSERT_TRUE(outcome.answer) << "closed: " << outcome.closedWith;
  EXPECT_EQ(outcome.answer->type, wire::MessageType::kResponse) << outcome.answer->error;

  expectRefused(inlined(), "more than one payload");

  const std::vector<char> args = sevenAsArguments();
  std::string partHeader = identityPartHeader();
  wire::appendInlinePayload(partHeader, args.data(), args.size());
  std::vector<char> batch;
  expectRefused(batchOfOne(batch, partHeader, {}), "an inline payload inside a batch",
                HeaderReadable::kNo);
}

// Device handles (wire::kDeviceHandles) travel only in a lane's frames: on a
// pipe message, alone or in a batch, they are refused, not ignored (they were
// until the lane's CUDA path: such a call was answered as if they were not there).
TEST_F(HostileMessageTest, DeviceHandlesInAPipeMessageOrABatchAreRefused) {
  const std::string junk(100, 'x');
  const std::vector<char> args = sevenAsArguments();
  tensorpipe::Message call;
  call.metadata = identityPartHeader();
  wire::appendInlinePayload(call.metadata, args.data(), args.size());
  wire::appendDeviceHandles(call.metadata, junk.data(), junk.size());
  expectRefused(std::move(call), "device handles in a pipe message (only lane frames carry them)");

  std::string partHeader = identityPartHeader();
  wire::appendDeviceHandles(partHeader, junk.data(), junk.size());
  std::vector<char> batch;
  expectRefused(batchOfOne(batch, partHeader, args), "device handles inside a batch",
                HeaderReadable::kNo);
}

// Distributed autograd's header fields: a peer that did not name itself may not
// use them, and flags that do not match the value (or mark a tensor that cannot
// require grad) are a bad request, answered, not a crash; the pipe stays usable.
TEST_F(HostileMessageTest, AutogradFlagsThatDoNotMatchTheValueAreABadRequest) {
  const float floats[4] = {1, 2, 3, 4};
  const int32_t ints[4] = {1, 2, 3, 4};
  auto call = [&](c10::ScalarType dtype, const void* data, std::vector<bool> flags) {
    tensorpipe::Message m = identityCall(tensorEntry(dtype, {4}, data, 16));
    wire::Header h;
    EXPECT_EQ(wire::decodeHeader(m.metadata.data(), m.metadata.size(), h), "");
    h.hasAutograd = true;
    h.autogradContext = 42;
    h.autogradSendId = 1;
    h.requiresGrad = std::move(flags);
    m.metadata = wire::encodeHeader(h);
    return send(std::move(m));
  };
  auto expectBadRequest = [](const Outcome& o, const std::string& reason) {
    ASSERT_FALSE(o.hung);
    ASSERT_TRUE(o.answer) << "closed: " << o.closedWith;
    EXPECT_EQ(o.answer->type, wire::MessageType::kError);
    EXPECT_EQ(o.answer->errorKind, wire::ErrorKind::kBadRequest);
    EXPECT_NE(o.answer->error.find(reason), std::string::npos) << o.answer->error;
  };
  expectBadRequest(call(c10::kFloat, floats, {true}), "unnamed peer");
  // The same from a pipe that names itself "driver" (w1 only knows the name).
  context_->close();
  context_->join();
  context_ = rawPeerContext("driver");
  expectBadRequest(call(c10::kFloat, floats, {true, false}), "2 flags for 1 tensors");
  expectBadRequest(call(c10::kFloat, floats, {}), "0 flags for 1 tensors");
  expectBadRequest(call(c10::kInt, ints, {true}), "cannot require grad");
  Outcome ok = call(c10::kFloat, floats, {true});
  ASSERT_TRUE(ok.answer) << ok.closedWith;
  EXPECT_EQ(ok.answer->type, wire::MessageType::kResponse) << ok.answer->error;
  EXPECT_TRUE(ok.answer->hasAutograd);  // the answer requires grad too: it records a send
  EXPECT_EQ(ok.answer->requiresGrad, std::vector<bool>{true});
  EXPECT_TRUE(workerStillAnswers());
}

// A lane frame that carries CUDA tensors as IPC handles (wire::kDeviceHandles),
// to a worker without a CUDA build (this machine's): it cannot take them, so it
// refuses the call with the reason (kRefused, as a pipe message it cannot
// read), takes nothing more from that lane, and keeps answering others. The control: a frame
// without handles on the same lane is answered on it, so the lane worked until then.
TEST_F(HostileMessageTest, CudaHandlesOnTheLaneOfAWorkerWithoutCudaAreRefusedWithTheReason) {
  namespace lane = runtime::lane;
  const auto lanesFailed = [this] {  // w1's count of lanes closed for a broken peer
    return cluster_->driver().rpcSync("w1", "lane_counters", {}).toTupleRef().elements()[2].toInt();
  };
  const int64_t failedBefore = lanesFailed();
  // Our lane and bell, offered on a pipe as the runtime's client does (offerLane).
  RawLane ours;
  std::string why;
  ours.lane = lane::Lane::create(lane::kDefaultCapacity, why);
  ASSERT_TRUE(ours.lane) << why;
  ASSERT_EQ(ours.makeBell(), "");
  auto pipe = context_->connect("uv://127.0.0.1:" + std::to_string(cluster_->port(1)),
                                tensorpipe::PipeOptions().remoteName("w1"));
  const auto next = [&pipe] {  // the next message w1 sends us, or why none came
    auto got = std::make_shared<std::promise<RawMessage>>();
    auto future = got->get_future();
    readRaw(pipe, [got](RawMessage m) { got->set_value(std::move(m)); });
    return future;
  };
  const auto write = [&pipe](tensorpipe::Message m) {
    pipe->write(std::move(m), [](const tensorpipe::Error&) {});
  };
  // The handshake: w1's descriptors say whether it has a CUDA build (device
  // maps' entry), which would take the handles (or refuse them otherwise).
  wire::Header h;
  h.type = wire::MessageType::kHello;
  auto reply = next();
  write(rawMessage(h, wire::encodeChannelDescriptors({})));
  ASSERT_EQ(reply.wait_for(kBound), std::future_status::ready) << "no answer to the hello";
  const RawMessage hello = reply.get();
  ASSERT_EQ(hello.error, "");
  ASSERT_EQ(hello.header.type, wire::MessageType::kHelloReply);
  wire::ChannelDescriptors descriptors;
  ASSERT_EQ(wire::decodeChannelDescriptors(hello.payload.data(), hello.payload.size(), descriptors),
            "");
  for (const auto& entry : descriptors) {
    if (entry.first == runtime::cuda::DeviceMapTable::kHandshakeEntry) {
      pipe->close();
      GTEST_SKIP() << "w1 has a CUDA build: this case is a CPU-only worker's";
    }
  }
  h = {};
  h.type = wire::MessageType::kLaneOffer;
  reply = next();
  write(rawMessage(h, lane::encodeOffer(ours.offer())));
  ASSERT_EQ(reply.wait_for(kBound), std::future_status::ready) << "no answer to the lane offer";
  const RawMessage accepted = reply.get();
  ASSERT_EQ(accepted.error, "");
  ASSERT_EQ(accepted.header.type, wire::MessageType::kLaneReply);
  ASSERT_EQ(accepted.header.error, "") << "w1 declined the lane";
  lane::LaneOffer theirs;
  ASSERT_EQ(lane::decodeOffer(accepted.payload.data(), accepted.payload.size(), theirs), "");
  EXPECT_FALSE(theirs.deviceTensors) << "a worker without CUDA said it takes CUDA tensors";
  ASSERT_EQ(ours.ringing(theirs), "");
  h = {};
  h.type = wire::MessageType::kLaneStart;  // the first ordered message of the pipe
  h.hasOrder = true;
  write(rawMessage(h));
  // A request frame, after that one pipe message: "identity" of 7.
  const std::string args = argumentsSeven();
  const auto frame = [&args](uint64_t id, const std::string& handles) {
    wire::Header call;
    call.type = wire::MessageType::kCall;
    call.id = id;
    call.function = "identity";
    std::string bytes = wire::encodeHeader(call);
    wire::appendOrder(bytes, 1);
    wire::appendInlinePayload(bytes, args.data(), args.size());
    if (!handles.empty()) wire::appendDeviceHandles(bytes, handles.data(), handles.size());
    return bytes;
  };
  const auto send = [&ours](const std::string& bytes) {
    std::string error;
    return ours.lane->send(bytes.data(), bytes.size(), &error) == lane::RingProducer::Status::kOk
               ? ""
               : "not sent: " + error;
  };

  ASSERT_EQ(send(frame(1, "")), "");
  std::string answer;
  ours.lane->setReceiver(
      [&answer](const char* data, size_t size, std::string&) {
        answer.assign(data, size);
        return lane::Delivery::kDelivered;
      },
      [](const std::string& why) { ADD_FAILURE() << "our lane broke: " << why; });
  for (auto until = Clock::now() + kBound; answer.empty() && Clock::now() < until;) {
    if (ours.lane->poll(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(answer.empty()) << "no answer on the lane to a frame without handles";
  wire::Header answered;
  ASSERT_EQ(wire::decodeHeader(answer.data(), answer.size(), answered), "");
  EXPECT_EQ(answered.type, wire::MessageType::kResponse) << answered.error;
  EXPECT_EQ(answered.id, 1u);

  // The same call with one CUDA tensor as handles (well-formed: the worker
  // must refuse them for want of CUDA, not for their bytes).
  wire::LaneTensors lent;
  lent.handoff = 1;
  wire::LaneTensor tensor;
  tensor.meta.dtype = static_cast<int8_t>(c10::kFloat);
  tensor.meta.deviceType = 1;
  tensor.meta.deviceIndex = 0;
  tensor.meta.sizes = {4};
  tensor.pid = ::getpid();
  tensor.device = 0;
  tensor.length = 16;
  lent.tensors.push_back(tensor);
  answer.clear();
  ASSERT_EQ(send(frame(2, wire::encodeLaneTensors(lent))), "");
  for (auto until = Clock::now() + kBound; answer.empty() && Clock::now() < until;) {
    if (ours.lane->poll(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Refused as a pipe message it cannot take is: the caller hears why (and
  // closes the pipe, as a runtime's client does on kRefused).
  ASSERT_FALSE(answer.empty()) << "no answer to the call with handles";
  ASSERT_EQ(wire::decodeHeader(answer.data(), answer.size(), answered), "");
  EXPECT_EQ(answered.type, wire::MessageType::kError);
  EXPECT_EQ(answered.errorKind, wire::ErrorKind::kRefused);
  EXPECT_EQ(answered.id, 2u);
  EXPECT_NE(answered.error.find("CUDA tensors as handles, but this worker has no CUDA build"),
            std::string::npos)
      << answered.error;
  EXPECT_TRUE(workerLoggedLine(
      "rpcjob: worker 'w1': refused a frame on the shared-memory lane: CUDA tensors as handles, "
      "but this worker has no CUDA build (a frame of type 3, id 2, function 'identity')"));
  // Nothing after it runs: the caller fails what it sent behind a refused call.
  answer.clear();
  ASSERT_EQ(send(frame(3, "")), "");
  for (auto until = Clock::now() + std::chrono::milliseconds(300); Clock::now() < until;) {
    if (ours.lane->poll(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(answer, "") << "w1 ran a frame that came after the refused one";
  pipe->close();
  EXPECT_TRUE(workerStillAnswers());
  EXPECT_EQ(lanesFailed(), failedBefore) << "a refused frame is no broken lane";
}

// A fake "w1" for a runtime in this process, its client: a raw TensorPipe
// listener that answers the handshake, then each call by its function's name:
// "copied" with a copy answer (wire::kLaneCopied, on the pipe: a server whose
// lane's ring is full sends it there), "hold" never, any other with its
// arguments. With `takesLanes`, its handshake says it takes lanes, and it
// takes each one its client offers (never reading it), so that a case can
// send the copy answer as the lane frame it normally is.
class FakeServer {
 public:
  FakeServer(int port, bool takesLanes) : takesLanes_(takesLanes), context_(rawPeerContext("w1")) {
    listener_ = context_->listen({"uv://127.0.0.1:" + std::to_string(port)});
    accept();
  }
  ~FakeServer() {
    context_->close();
    context_->join();
  }

  int pipesAccepted() const { return accepted_.load(); }

  // Waits (bounded) until the client's kLaneStart came: the lane is its
  // requests' from then on.
  bool waitLaneStarted() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kBound, [this] { return laneStarted_; });
  }
  // Whether requests wait, unread, in the lane's ring.
  bool laneHasRequests() {
    std::lock_guard<std::mutex> lock(mu_);
    return lane_.lane && lane_.lane->hasData();
  }
  // The copy answer as the server's answerCopied sends it: a frame without order.
  runtime::lane::RingProducer::Status sendCopiedOnLane() {
    return sendOnLane(copyAnswerHeader(), copyAnswer());
  }
  // Landing offers as the server's sendLandingOffers sends them: a frame
  // without order, one buffer of 4 MiB on cuda:1.
  runtime::lane::RingProducer::Status sendOffersOnLane() {
    wire::Header h;
    h.type = wire::MessageType::kLaneOffers;
    wire::LandingOffer offer;
    offer.id = 1;
    offer.device = 1;
    offer.pid = ::getpid();
    offer.length = 4 << 20;
    return sendOnLane(h, wire::encodeLandingOffers({offer}));
  }

 private:
  // For the tensors handed off as 1, done once one event occurred.
  static wire::Header copyAnswerHeader() {
    wire::Header h;
    h.type = wire::MessageType::kLaneCopied;
    h.id = 1;
    return h;
  }
  static std::string copyAnswer() {
    wire::LaneCopied copied;
    copied.done.push_back({});
    return wire::encodeLaneCopied(copied);
  }
  runtime::lane::RingProducer::Status sendOnLane(const wire::Header& h,
                                                 const std::string& payload) {
    std::string frame = wire::encodeHeader(h);
    wire::appendInlinePayload(frame, payload.data(), payload.size());
    std::lock_guard<std::mutex> lock(mu_);
    if (!lane_.lane) return runtime::lane::RingProducer::Status::kClosed;
    return lane_.lane->send(frame.data(), frame.size(), nullptr);
  }

  void accept() {
    listener_->accept([this](const tensorpipe::Error& error, std::shared_ptr<tensorpipe::Pipe> p) {
      if (error) return;  // closed
      accepted_++;
      serve(std::move(p));
      accept();
    });
  }

  void serve(std::shared_ptr<tensorpipe::Pipe> pipe) {
    readRaw(pipe, [this, pipe](RawMessage m) {
      if (!m.error.empty()) return;  // the client closed the pipe, or sent garbage
      if (m.header.type != wire::MessageType::kBatch) {
        handle(*pipe, m);
      } else {
        std::vector<wire::BatchEntry> entries;
        if (!wire::decodeBatch(m.payload.data(), m.payload.size(), entries).empty()) return;
        for (const auto& e : entries) {
          RawMessage part;
          if (!wire::decodeHeader(m.payload.data() + e.headerOffset, e.headerLength, part.header)
                   .empty()) {
            return;
          }
          part.payload = m.payload.substr(e.payloadOffset, e.payloadLength);
          handle(*pipe, part);
        }
      }
      serve(pipe);
    });
  }

  void handle(tensorpipe::Pipe& pipe, const RawMessage& m) {
    wire::Header reply;
    std::string payload;
    switch (m.header.type) {
      case wire::MessageType::kHello: {
        reply.type = wire::MessageType::kHelloReply;
        wire::ChannelDescriptors ours;
        if (takesLanes_) ours.push_back({wire::kLaneDescriptor, laneDescriptor()});
        payload = wire::encodeChannelDescriptors(ours);
        break;
      }
      case wire::MessageType::kLaneOffer:
        reply.type = wire::MessageType::kLaneReply;
        reply.error = takeLane(m.payload, payload);
        break;
      case wire::MessageType::kLaneStart: {
        std::lock_guard<std::mutex> lock(mu_);
        laneStarted_ = true;
        cv_.notify_all();
        return;
      }
      case wire::MessageType::kCall:
        if (m.header.function == "hold") return;
        if (m.header.function == "copied") {
          reply = copyAnswerHeader();
          payload = copyAnswer();
        } else {
          reply.type = wire::MessageType::kResponse;
          reply.id = m.header.id;
          payload = m.payload;
        }
        break;
      default:
        return;
    }
    pipe.write(rawMessage(reply, payload), [](const tensorpipe::Error&) {});
  }

  // What the runtime's laneDescriptor() says of this process: the client
  // offers a lane to a server on its host and in its pid namespace.
  static wire::DeviceDescriptors laneDescriptor() {
    std::string boot;
    std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot);
    char ns[256];
    const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns));
    return {{boot, std::string(ns, n > 0 ? static_cast<size_t>(n) : 0) + ":" +
                       std::to_string(::getpid())}};
  }

  // Opens the lane offered, with a bell of ours; "" (and the answer's payload)
  // or why not.
  std::string takeLane(const std::string& offerBytes, std::string& answer) {
    namespace lane = runtime::lane;
    lane::LaneOffer offer;
    std::string why = lane::decodeOffer(offerBytes.data(), offerBytes.size(), offer);
    RawLane taken;
    if (why.empty()) taken.lane = lane::Lane::open(offer, why);
    if (taken.lane && (why = taken.makeBell()).empty()) why = taken.ringing(offer);
    if (!why.empty()) return why;
    answer = lane::encodeOffer(taken.offer());
    std::lock_guard<std::mutex> lock(mu_);
    lane_ = std::move(taken);
    laneStarted_ = false;
    return "";
  }

  const bool takesLanes_;
  std::shared_ptr<tensorpipe::Context> context_;
  std::shared_ptr<tensorpipe::Listener> listener_;
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  RawLane lane_;  // the latest taken
  bool laneStarted_ = false;
};

// A runtime here (its client) and the fake w1 above on the second address.
struct FakeServerJob {
  explicit FakeServerJob(bool takesLanes)
      : ports(2),
        w1(ports.ports()[1], takesLanes),
        driver(assignmentFromPeerList("driver@127.0.0.1:" + std::to_string(ports.ports()[0]) +
                                      ",w1@127.0.0.1:" + std::to_string(ports.ports()[1])),
               "driver", options()) {
    driver.start();
  }
  static runtime::RuntimeOptions options() {
    runtime::RuntimeOptions o;
    o.startTimeout = kBound;
    return o;
  }
  PortReservation ports;
  FakeServer w1;
  runtime::Runtime driver;
};

// What a call that was waiting on w1's pipe must fail with: the reason, not a
// broken connection or a timeout.
constexpr const char* kCopyAnswerFailure =
    "connection to worker 'w1' failed: worker 'w1' sent a copy answer, but no CUDA tensors were "
    "lent to it";

constexpr const char* kOffersFailure =
    "connection to worker 'w1' failed: worker 'w1' sent landing offers, but no CUDA tensors go to "
    "it on the lane";

::testing::AssertionResult failedWith(runtime::Future& call, const char* reason) {
  if (!call.waitFor(kBound)) return ::testing::AssertionFailure() << "still waiting";
  if (!call.hasError()) return ::testing::AssertionFailure() << "it succeeded";
  if (call.errorMessage().find(reason) == std::string::npos) {
    return ::testing::AssertionFailure() << call.errorMessage();
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult failedWithCopyAnswer(runtime::Future& call) {
  return failedWith(call, kCopyAnswerFailure);
}

// The next call to w1 dials it again and gets its answer.
::testing::AssertionResult nextCallWorks(FakeServerJob& job) {
  auto call = job.driver.rpcAsync("w1", "echo", {int64_t{7}});
  if (!call.waitFor(kBound)) return ::testing::AssertionFailure() << "the next call hangs";
  if (call.hasError()) return ::testing::AssertionFailure() << call.errorMessage();
  const auto value = call.value();
  if (!value.isTuple() || value.toTupleRef().elements().size() != 1 ||
      value.toTupleRef().elements()[0].toInt() != 7) {
    return ::testing::AssertionFailure() << value;
  }
  return ::testing::AssertionSuccess();
}

// A copy answer on the pipe to a client that lent w1 no CUDA tensors (a CPU-only
// client never does): it fails the pipe, the calls on it with the reason, and
// the next call connects again.
TEST(HostileServerTest, ACopyAnswerOnThePipeFailsItsCallsWithTheReasonAndTheNextCallWorks) {
  FakeServerJob job(/*takesLanes=*/false);
  EXPECT_TRUE(nextCallWorks(job));  // the control
  EXPECT_EQ(job.w1.pipesAccepted(), 1);
  const auto start = Clock::now();
  auto held = job.driver.rpcAsync("w1", "hold", {int64_t{1}});
  auto copied = job.driver.rpcAsync("w1", "copied", {});
  EXPECT_TRUE(failedWithCopyAnswer(copied));
  EXPECT_TRUE(failedWithCopyAnswer(held));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(nextCallWorks(job));
  EXPECT_EQ(job.w1.pipesAccepted(), 2);
  job.driver.shutdown(runtime::ShutdownMode::kImmediate);
}

// A call waiting on the lane to the fake w1, then the frame `send` puts on
// it (unordered, as the server sends its own): the lane's poller fails the
// pipe and the call with `reason`, soon, and the next call connects again.
void expectALaneFrameFailsTheCall(
    const std::function<runtime::lane::RingProducer::Status(FakeServer&)>& send,
    const char* reason) {
  FakeServerJob job(/*takesLanes=*/true);
  ASSERT_TRUE(job.w1.waitLaneStarted()) << "the runtime took no lane to the fake w1";
  auto held = job.driver.rpcAsync("w1", "hold", {int64_t{1}});
  EXPECT_TRUE(job.w1.laneHasRequests()) << "the call did not take the lane";
  const auto start = Clock::now();
  ASSERT_EQ(send(job.w1), runtime::lane::RingProducer::Status::kOk);
  EXPECT_TRUE(failedWith(held, reason));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(nextCallWorks(job));
  EXPECT_EQ(job.w1.pipesAccepted(), 2);
  job.driver.shutdown(runtime::ShutdownMode::kImmediate);
}

// The same answer as the lane frame it normally is (answerCopied's).
TEST(HostileServerTest, ACopyAnswerOnTheLaneFailsItsCallsWithTheReasonAndTheNextCallWorks) {
  expectALaneFrameFailsTheCall([](FakeServer& w1) { return w1.sendCopiedOnLane(); },
                               kCopyAnswerFailure);
}

// Landing offers (wire::kLaneOffers) on the lane to a client that lends w1 no
// CUDA tensors there (a CPU-only client, whose lane offer never asks for
// them): the lane's poller fails the pipe and the call that waits on the
// lane with the reason, and the next call connects again.
TEST(HostileServerTest, LandingOffersToAClientThatTakesNoneFailItsCallsWithTheReason) {
  expectALaneFrameFailsTheCall([](FakeServer& w1) { return w1.sendOffersOnLane(); },
                               kOffersFailure);
}

// A worker reads every message of a pipe into the same buffers
// (RuntimeImpl::PipeReader): a message without a payload that follows one with
// a payload must not be read as carrying the earlier one. "identity" with
// arguments, then "identity" with no payload at all, on one pipe: the second is
// a bad request (its arguments are not a tuple), not an echo of the first's.
TEST_F(HostileMessageTest, AMessageWithoutAPayloadIsNotReadAsThePreviousOnes) {
  namespace rpcjob_tp = tensorpipe;
  auto call = [](uint64_t id, bool withArguments) {
    wire::Header header;
    header.type = wire::MessageType::kCall;
    header.id = id;
    header.function = "identity";
    rpcjob_tp::Message m;
    m.metadata = wire::encodeHeader(header);
    if (withArguments) {
      std::vector<char> args;
      wire::FastEncoder encoder(args);
      encoder.tuple(1);
      encoder.integer(5);
      wire::appendInlinePayload(m.metadata, args.data(), args.size());
    }
    return m;
  };
  auto pipe = context_->connect("uv://127.0.0.1:" + std::to_string(cluster_->port(1)),
                                rpcjob_tp::PipeOptions().remoteName("w1"));
  auto answers = std::make_shared<std::promise<std::vector<wire::Header>>>();
  auto done = answers->get_future();
  auto got = std::make_shared<std::vector<wire::Header>>();
  // Reads answers until two arrived or the pipe fails (then fewer are reported).
  auto readAnswer = std::make_shared<std::function<void()>>();
  *readAnswer = [pipe, got, answers, readAnswer] {
    pipe->readDescriptor([=](const rpcjob_tp::Error& error, rpcjob_tp::Descriptor d) {
      if (error) return answers->set_value(*got);
      wire::Header h;
      if (!wire::decodeHeader(d.metadata.data(), d.metadata.size(), h).empty()) {
        return answers->set_value(*got);
      }
      auto buffers = std::make_shared<std::vector<std::vector<char>>>();
      rpcjob_tp::Allocation allocation;
      for (const auto& p : d.payloads) {
        buffers->emplace_back(p.length);
        allocation.payloads.push_back({buffers->back().data()});
      }
      pipe->read(std::move(allocation), [=](const rpcjob_tp::Error& error) {
        got->push_back(h);
        if (error || got->size() == 2) {
          answers->set_value(*got);
          *readAnswer = nullptr;  // the cycle through the closure ends here
          return;
        }
        (*readAnswer)();
      });
    });
  };
  (*readAnswer)();
  pipe->write(call(1, true), [](const rpcjob_tp::Error&) {});
  pipe->write(call(2, false), [](const rpcjob_tp::Error&) {});
  ASSERT_EQ(done.wait_for(kBound), std::future_status::ready) << "no answers";
  std::vector<wire::Header> received = done.get();
  pipe->close();
  ASSERT_EQ(received.size(), 2u);
  // "identity" runs on the pool, the refusal on the read thread: either may be first.
  std::sort(received.begin(), received.end(),
            [](const wire::Header& a, const wire::Header& b) { return a.id < b.id; });
  EXPECT_EQ(received[0].id, 1u);
  EXPECT_EQ(received[0].type, wire::MessageType::kResponse) << received[0].error;
  EXPECT_EQ(received[1].id, 2u);
  EXPECT_EQ(received[1].type, wire::MessageType::kError);
  EXPECT_EQ(received[1].errorKind, wire::ErrorKind::kBadRequest);
  EXPECT_NE(received[1].error.find("not a tuple"), std::string::npos) << received[1].error;
  EXPECT_TRUE(workerStillAnswers());
}

}  // namespace
}  // namespace rpcjob::testing
