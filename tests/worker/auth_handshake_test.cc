// The handshake of worker/src/auth/handshake.h, both sides in one process: HMAC
// against RFC 4231, the codec's refusals, and the protocol's properties (a
// different secret, a replayed proof, a reflected one, a relayed one all fail).
#include "handshake.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace rpcjob::auth {
namespace {

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

const std::string kSecret(32, 'k');
const std::string kOther(32, 'o');

TEST(HmacSha256, MatchesRfc4231) {
  // Test cases 1, 2 and 6 (a key longer than the block).
  EXPECT_EQ(hex(hmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(EqualConstantTime, ComparesContentAndLength) {
  EXPECT_TRUE(equalConstantTime("abc", "abc"));
  EXPECT_FALSE(equalConstantTime("abc", "abd"));
  EXPECT_FALSE(equalConstantTime("abc", "ab"));
}

TEST(RandomBytes, AreFreshEachTime) {
  EXPECT_EQ(randomBytes(kNonceBytes).size(), kNonceBytes);
  EXPECT_NE(randomBytes(kNonceBytes), randomBytes(kNonceBytes));
}

TEST(Codec, RoundTripsEachStep) {
  Message hello{Step::kHello, std::string(kNonceBytes, 'n'), "", "w1"};
  Message challenge{Step::kChallenge, std::string(kNonceBytes, 'n'), std::string(kMacBytes, 'm'),
                    ""};
  Message proof{Step::kProof, "", std::string(kMacBytes, 'm'), ""};
  for (const Message& m : {hello, challenge, proof}) {
    std::string bytes = encode(m);
    Message out;
    ASSERT_EQ(decode(bytes.data(), bytes.size(), out), "");
    EXPECT_EQ(out.step, m.step);
    EXPECT_EQ(out.nonce, m.nonce);
    EXPECT_EQ(out.mac, m.mac);
    EXPECT_EQ(out.name, m.name);
  }
}

TEST(Codec, RefusesEveryTruncationAndTrailingBytes) {
  std::string bytes = encode({Step::kHello, std::string(kNonceBytes, 'n'), "", "worker"});
  Message out;
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_NE(decode(bytes.data(), n, out), "") << n;
  }
  std::string longer = bytes + "x";
  EXPECT_NE(decode(longer.data(), longer.size(), out), "");
}

TEST(Codec, RefusesWrongMagicVersionStepAndNames) {
  Message out;
  std::string bytes = encode({Step::kProof, "", std::string(kMacBytes, 'm'), ""});
  std::string magic = bytes, version = bytes, step = bytes;
  magic[0] = 'R', magic[1] = 'J';
  version[2] = 2;
  step[3] = 9;
  EXPECT_NE(decode(magic.data(), magic.size(), out), "");
  EXPECT_NE(decode(version.data(), version.size(), out), "");
  EXPECT_NE(decode(step.data(), step.size(), out), "");
  std::string empty = encode({Step::kHello, std::string(kNonceBytes, 'n'), "", ""});
  EXPECT_NE(decode(empty.data(), empty.size(), out), "");
  std::string huge(kMaxMessageBytes + 1, 'x');
  EXPECT_NE(decode(huge.data(), huge.size(), out), "");
  std::string longest =
      encode({Step::kHello, std::string(kNonceBytes, 'n'), "", std::string(kMaxName, 'a')});
  EXPECT_EQ(decode(longest.data(), longest.size(), out), "");
}

// One handshake between a client and a server; true when both admitted.
bool handshake(const std::string& clientSecret, const std::string& serverSecret) {
  ClientHandshake client(clientSecret, "w1", "w2");
  ServerHandshake server(serverSecret, "w2");
  Failure why;
  std::string hello = client.hello();
  auto challenge = server.onHello(hello.data(), hello.size(), "w1", why);
  if (!challenge) return false;
  auto proof = client.onChallenge(challenge->data(), challenge->size(), why);
  if (!proof) return false;
  return server.onProof(proof->data(), proof->size(), why);
}

TEST(Handshake, AdmitsTheSameSecretOnly) {
  EXPECT_TRUE(handshake(kSecret, kSecret));
  EXPECT_FALSE(handshake(kSecret, kOther));
  EXPECT_FALSE(handshake(kOther, kSecret));
}

TEST(Handshake, ClientRefusesAServerWithAnotherSecret) {
  ClientHandshake client(kSecret, "w1", "w2");
  ServerHandshake server(kOther, "w2");
  Failure why = Failure::kMalformed;
  std::string hello = client.hello();
  auto challenge = server.onHello(hello.data(), hello.size(), "w1", why);
  ASSERT_TRUE(challenge);
  EXPECT_FALSE(client.onChallenge(challenge->data(), challenge->size(), why));
  EXPECT_EQ(why, Failure::kBadProof);
}

TEST(Handshake, AReplayedProofFailsAgainstAFreshChallenge) {
  // A recorded, valid handshake...
  ClientHandshake client(kSecret, "w1", "w2");
  ServerHandshake first(kSecret, "w2");
  Failure why;
  std::string hello = client.hello();
  auto challenge = first.onHello(hello.data(), hello.size(), "w1", why);
  auto proof = client.onChallenge(challenge->data(), challenge->size(), why);
  ASSERT_TRUE(first.onProof(proof->data(), proof->size(), why));
  // ... replayed, hello and proof, to a new server session.
  ServerHandshake second(kSecret, "w2");
  ASSERT_TRUE(second.onHello(hello.data(), hello.size(), "w1", why));
  EXPECT_FALSE(second.onProof(proof->data(), proof->size(), why));
  EXPECT_EQ(why, Failure::kBadProof);
}

TEST(Handshake, AServersProofReflectedAsAClientsFails) {
  // An attacker relays the server's own MAC back as the client proof.
  ClientHandshake client(kSecret, "w1", "w2");
  ServerHandshake server(kSecret, "w2");
  Failure why;
  std::string hello = client.hello();
  auto challenge = server.onHello(hello.data(), hello.size(), "w1", why);
  Message c;
  ASSERT_EQ(decode(challenge->data(), challenge->size(), c), "");
  std::string reflected = encode({Step::kProof, "", c.mac, ""});
  EXPECT_FALSE(server.onProof(reflected.data(), reflected.size(), why));
  EXPECT_EQ(why, Failure::kBadProof);
}

TEST(Handshake, AChallengeForAnotherWorkerFails) {
  // w1 dialled w2, but a w3 answers (with the job's secret): the names differ.
  ClientHandshake client(kSecret, "w1", "w2");
  ServerHandshake w3(kSecret, "w3");
  Failure why;
  std::string hello = client.hello();
  auto challenge = w3.onHello(hello.data(), hello.size(), "w1", why);
  ASSERT_TRUE(challenge);
  EXPECT_FALSE(client.onChallenge(challenge->data(), challenge->size(), why));
  EXPECT_EQ(why, Failure::kBadProof);
}

TEST(Handshake, ServerClassifiesWhatIsNoHello) {
  ServerHandshake server(kSecret, "w2");
  Failure why = Failure::kBadProof;
  std::string rpc = "RJ\x01\x01";  // rpcjob's own header: a peer that skipped the handshake
  EXPECT_FALSE(server.onHello(rpc.data(), rpc.size(), "w1", why));
  EXPECT_EQ(why, Failure::kUnauthenticated);
  std::string garbage = "\x00\x01garbage";
  EXPECT_FALSE(server.onHello(garbage.data(), garbage.size(), "w1", why));
  EXPECT_EQ(why, Failure::kMalformed);
  // A hello whose name is not the one the peer gave TensorPipe.
  ClientHandshake client(kSecret, "w1", "w2");
  std::string hello = client.hello();
  EXPECT_FALSE(server.onHello(hello.data(), hello.size(), "w9", why));
  EXPECT_EQ(why, Failure::kMalformed);
}

TEST(ReadSecretFile, ReadsItAndRefusesShortOrMissingFilesWithoutEchoingThem) {
  char path[] = "/tmp/rpcjob-secret-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << kSecret; }
  EXPECT_EQ(readSecretFile(path), kSecret);
  { std::ofstream(path) << "tooshort-secret"; }
  try {
    readSecretFile(path);
    ADD_FAILURE() << "a 15-byte secret was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find("tooshort"), std::string::npos) << e.what();
  }
  std::remove(path);
  EXPECT_THROW(readSecretFile(path), std::invalid_argument);
}

}  // namespace
}  // namespace rpcjob::auth
