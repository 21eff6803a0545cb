// Authenticated pipes between real processes on loopback: w1 (a worker process)
// and the driver share the job's secret; a third party that speaks rpcjob's
// protocol on a raw TensorPipe pipe, but lacks the secret, cannot call w1's
// functions. Hostile handshakes (none, a wrong secret, a replay, one that stops
// halfway, garbage, a huge length) are each closed, counted by reason
// (Observer::handshakeFailed, read back through w1's "handshake_failures"), and
// w1 keeps serving the driver. The secret never reaches w1's log.
#include <ATen/core/ivalue.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tensorpipe/tensorpipe.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "auth/handshake.h"
#include "autograd_functions.h"
#include "cluster.h"
#include "header_codec.h"
#include "raw_peer.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/runtime/dist_autograd.h"
#include "rpcjob/runtime/remote_object.h"
#include "test_functions.h"

namespace rpcjob::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::seconds kBound{10};
constexpr std::chrono::milliseconds kHandshakeTimeout{1000};  // w1's, from the environment
const std::string kSecret = "rpcjob-auth-test-secret-0123456789abcdef";

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What a raw pipe read: a message's metadata and payload, or the pipe closed.
struct Read {
  bool timedOut = false;
  bool closed = false;
  std::string metadata;
  std::vector<char> payload;
};

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "auth_test_XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
    secretFile_ = dir_ + "/secret";
    std::ofstream(secretFile_) << kSecret;
    log_ = dir_ + "/w1.log";
    int fd = open(log_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    runtime::RuntimeOptions options;
    options.secret = kSecret;
    cluster_ =
        clusterLoggingTo(fd,
                         {{kEnvSecretFile, secretFile_},
                          {kEnvHandshakeTimeoutMs, std::to_string(kHandshakeTimeout.count())}},
                         options);
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
    const std::string log = readFile(log_);
    EXPECT_EQ(log.find(kSecret), std::string::npos) << "w1 logged the secret";
    if (HasFailure()) std::cout << "w1's stderr:\n" << log;
    std::remove(log_.c_str());
    std::remove(secretFile_.c_str());
    rmdir(dir_.c_str());
  }

  std::shared_ptr<tensorpipe::Pipe> dial() {
    return context_->connect("uv://127.0.0.1:" + std::to_string(cluster_->port(1)),
                             tensorpipe::PipeOptions().remoteName("w1"));
  }

  static void write(const std::shared_ptr<tensorpipe::Pipe>& pipe, tensorpipe::Message m) {
    pipe->write(std::move(m), [](const tensorpipe::Error&) {});
  }
  static void write(const std::shared_ptr<tensorpipe::Pipe>& pipe, std::string metadata) {
    tensorpipe::Message m;
    m.metadata = std::move(metadata);
    write(pipe, std::move(m));
  }

  // The next message on `pipe` (payload read too), or that it closed.
  static Read read(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                   std::chrono::milliseconds bound = kBound) {
    auto done = std::make_shared<std::promise<Read>>();
    auto future = done->get_future();
    pipe->readDescriptor([pipe, done](const tensorpipe::Error& error, tensorpipe::Descriptor d) {
      auto r = std::make_shared<Read>();
      if (error) {
        r->closed = true;
        done->set_value(*r);
        return;
      }
      r->metadata = d.metadata;
      tensorpipe::Allocation allocation;
      if (d.payloads.size() == 1) {
        r->payload.resize(d.payloads[0].length);
        allocation.payloads.push_back({r->payload.data()});
      }
      pipe->read(std::move(allocation), [done, r](const tensorpipe::Error& error) {
        r->closed = static_cast<bool>(error);
        done->set_value(*r);
      });
    });
    if (future.wait_for(bound) != std::future_status::ready) {
      Read r;
      r.timedOut = true;
      pipe->close();
      future.wait_for(kBound);
      return r;
    }
    return future.get();
  }

  // rpcjob's own call of "identity"(5), as the driver would send it.
  static tensorpipe::Message identityCall(std::vector<char>& payload) {
    wire::Header header;
    header.type = wire::MessageType::kCall;
    header.id = 7;
    header.function = "identity";
    payload.clear();
    wire::FastEncoder args(payload);
    args.tuple(1);
    args.integer(5);
    tensorpipe::Message m;
    m.metadata = wire::encodeHeader(header);
    m.payloads.push_back({payload.data(), payload.size(), ""});
    return m;
  }

  // Writes rpcjob's hello and a call of "identity" on an admitted pipe; true when w1
  // answered the call with a value.
  bool callIdentity(const std::shared_ptr<tensorpipe::Pipe>& pipe) {
    wire::Header hello;
    hello.type = wire::MessageType::kHello;
    tensorpipe::Message h;
    h.metadata = wire::encodeHeader(hello);
    write(pipe, std::move(h));
    std::vector<char> payload;
    write(pipe, identityCall(payload));
    for (int i = 0; i < 2; ++i) {
      Read r = read(pipe);
      if (r.closed || r.timedOut) return false;
      wire::Header header;
      if (!wire::decodeHeader(r.metadata.data(), r.metadata.size(), header).empty()) return false;
      if (header.type == wire::MessageType::kResponse) return header.id == 7;
      if (header.type == wire::MessageType::kError) ADD_FAILURE() << header.error;
    }
    return false;
  }

  int64_t failures(const std::string& reason) {
    return cluster_->driver().rpcSync("w1", "handshake_failures", {c10::IValue(reason)}).toInt();
  }

  // w1 closed `pipe` (within the bound), counted it as `reason`, and still
  // serves the driver.
  void expectRefused(const std::shared_ptr<tensorpipe::Pipe>& pipe, const std::string& reason,
                     int64_t before) {
    Read r = read(pipe);
    EXPECT_FALSE(r.timedOut) << "w1 neither answered nor closed the pipe";
    EXPECT_TRUE(r.closed) << "w1 answered an unauthenticated peer";
    EXPECT_EQ(failures(reason), before + 1) << reason;
    EXPECT_EQ(cluster_->driver().rpcSync("w1", "identity", {5}).toInt(), 5);
  }

  std::string dir_, secretFile_, log_;
  std::unique_ptr<Cluster> cluster_;
  std::shared_ptr<tensorpipe::Context> context_;
};

TEST_F(AuthTest, APeerWithTheSecretCanCall) {
  auto pipe = dial();
  auth::ClientHandshake client(kSecret, "hostile", "w1");
  write(pipe, client.hello());
  Read challenge = read(pipe);
  ASSERT_FALSE(challenge.closed || challenge.timedOut);
  auth::Failure why;
  auto proof = client.onChallenge(challenge.metadata.data(), challenge.metadata.size(), why);
  ASSERT_TRUE(proof) << "w1 did not prove that it holds the secret";
  write(pipe, *proof);
  EXPECT_TRUE(callIdentity(pipe));
}

// Distributed autograd and remote objects add messages of their own (backward
// passes, RRef forks, fetches and deletes, method calls), in both directions:
// they all flow on the admitted pipes, and none is mistaken for a handshake.
TEST_F(AuthTest, AutogradAndRemoteObjectsFlowOnAuthenticatedPipes) {
  runtime::Runtime& rt = cluster_->driver();
  std::vector<int64_t> refusedBefore;
  for (const char* reason : {"bad_proof", "unauthenticated", "malformed", "too_large"}) {
    refusedBefore.push_back(failures(reason));
  }
  // y = w1's linear (here's linear (x)); the backward crosses to w1 and back.
  rt.rpcSync("w1", "ag.make_linear", {std::string("rm"), int64_t{8}, int64_t{8}, int64_t{2}});
  auto [lw, lb] = linearParams(8, 8, 1);
  const at::Tensor x = at::randn({4, 8});
  {
    runtime::dist_autograd::Context ctx(rt);
    at::Tensor y =
        rt.rpcSync("w1", "ag.linear", {std::string("rm"), linearForward(lw, lb, x)}).toTensor();
    runtime::dist_autograd::backward(rt, ctx.id(), {y.sum()});
    auto [rw, rb] = linearParams(8, 8, 2);
    auto [refW, refB] = linearParams(8, 8, 1);
    const auto g =
        torch::autograd::grad({linearForward(rw, rb, linearForward(refW, refB, x)).sum()}, {refW});
    const at::Tensor got = runtime::dist_autograd::gradientOf(rt, ctx.id(), lw);
    ASSERT_TRUE(got.defined());
    EXPECT_TRUE(at::allclose(got, g[0], 1e-5, 1e-6));
  }
  // A remote object on w1 consuming an RRef that the driver owns (w1 fetches it).
  {
    runtime::RRef stage = rt.remote("w1", "Stage1", {int64_t{4}, int64_t{8}});
    const at::Tensor batch = at::randn({2, 4});
    runtime::RRef in = rt.makeRRef(batch);
    runtime::RRef out = stage.remote("forward", {in.toIValue()});
    EXPECT_EQ(out.owner(), "w1");
    EXPECT_EQ(out.toHere().toTensor().sizes(), at::IntArrayRef({2, 8}));
  }
  int i = 0;
  for (const char* reason : {"bad_proof", "unauthenticated", "malformed", "too_large"}) {
    EXPECT_EQ(failures(reason), refusedBefore[i++]) << reason;
  }
}

TEST_F(AuthTest, APeerWithoutTheSecretCannotCall) {
  const int64_t before = failures("unauthenticated");
  auto pipe = dial();
  std::vector<char> payload;
  write(pipe, identityCall(payload));  // straight to a call, as before authentication
  expectRefused(pipe, "unauthenticated", before);
}

TEST_F(AuthTest, APeerWithAnotherSecretIsRefused) {
  const int64_t before = failures("bad_proof");
  auto pipe = dial();
  const std::string other = "another-jobs-secret-0123456789abcdef";
  auth::ClientHandshake client(other, "hostile", "w1");
  write(pipe, client.hello());
  Read challenge = read(pipe);
  ASSERT_FALSE(challenge.closed || challenge.timedOut);
  // w1's proof does not check out under our secret; answer with our own MAC anyway.
  auth::Failure why;
  EXPECT_FALSE(client.onChallenge(challenge.metadata.data(), challenge.metadata.size(), why));
  write(pipe, auth::encode({auth::Step::kProof, "", auth::hmacSha256(other, "guess"), ""}));
  expectRefused(pipe, "bad_proof", before);
}

TEST_F(AuthTest, AReplayedHandshakeIsRefused) {
  // A handshake recorded on the wire...
  auto first = dial();
  auth::ClientHandshake client(kSecret, "hostile", "w1");
  const std::string hello = client.hello();
  write(first, hello);
  Read challenge = read(first);
  ASSERT_FALSE(challenge.closed || challenge.timedOut);
  auth::Failure why;
  auto proof = client.onChallenge(challenge.metadata.data(), challenge.metadata.size(), why);
  ASSERT_TRUE(proof);
  write(first, *proof);
  ASSERT_TRUE(callIdentity(first));
  // ... replayed by someone without the secret on a new pipe.
  const int64_t before = failures("bad_proof");
  auto second = dial();
  write(second, hello);
  ASSERT_FALSE(read(second).closed);  // w1's fresh challenge, which the replay cannot answer
  write(second, *proof);
  expectRefused(second, "bad_proof", before);
}

TEST_F(AuthTest, AHandshakeThatStopsHalfwayIsClosedWithinTheBound) {
  const int64_t before = failures("timeout");
  auto pipe = dial();
  auth::ClientHandshake client(kSecret, "hostile", "w1");
  write(pipe, client.hello());
  ASSERT_FALSE(read(pipe).closed);  // the challenge; we never answer it
  const auto start = Clock::now();
  Read r = read(pipe, kHandshakeTimeout * 5);
  EXPECT_TRUE(r.closed) << "w1 kept a stalled handshake open";
  EXPECT_LT(Clock::now() - start, kHandshakeTimeout * 5);
  EXPECT_EQ(failures("timeout"), before + 1);
  // A peer that connects and says nothing at all is closed the same way.
  auto silent = dial();
  EXPECT_TRUE(read(silent, kHandshakeTimeout * 5).closed);
  EXPECT_EQ(failures("timeout"), before + 2);
  EXPECT_EQ(cluster_->driver().rpcSync("w1", "identity", {5}).toInt(), 5);
}

TEST_F(AuthTest, GarbageIsRefused) {
  const int64_t before = failures("malformed");
  auto pipe = dial();
  write(pipe, std::string("\x00\xff garbage \x7f\x01", 14));
  expectRefused(pipe, "malformed", before);
}

TEST_F(AuthTest, AHugeLengthIsRefusedUnread) {
  // A 64 GiB tensor announced before authentication: nothing is allocated for it.
  const size_t bytes = size_t{1} << 36;
  void* zeros = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(zeros, MAP_FAILED);
  const int64_t before = failures("too_large");
  auto pipe = dial();
  tensorpipe::Message m;
  m.metadata = "x";
  tensorpipe::Message::Tensor t;
  t.buffer = tensorpipe::CpuBuffer{zeros};
  t.length = bytes;
  m.tensors.push_back(std::move(t));
  auto written = std::make_shared<std::promise<void>>();
  pipe->write(std::move(m), [written](const tensorpipe::Error&) { written->set_value(); });
  expectRefused(pipe, "too_large", before);
  // And a handshake-sized message that is not: metadata of a megabyte.
  auto big = dial();
  write(big, std::string(1 << 20, 'a'));
  expectRefused(big, "too_large", before + 1);
  pipe->close();
  EXPECT_EQ(written->get_future().wait_for(kBound), std::future_status::ready);
  munmap(zeros, bytes);
}

}  // namespace
}  // namespace rpcjob::testing
