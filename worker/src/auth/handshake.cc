#include "handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace rpcjob::auth {
namespace {

constexpr char kMagic[2] = {'R', 'A'};

void appendName(std::string& out, const std::string& name) {
  out.push_back(static_cast<char>(name.size() & 0xff));
  out.push_back(static_cast<char>((name.size() >> 8) & 0xff));
  out += name;
}

// What each side's MAC covers: its role, both nonces and both names, each
// length-prefixed so that no two transcripts concatenate alike.
std::string transcript(const char* role, const std::string& clientNonce,
                       const std::string& serverNonce, const std::string& client,
                       const std::string& server) {
  std::string t = "rpcjob-auth-v1/";
  t += role;
  t.push_back('\0');
  t += clientNonce;
  t += serverNonce;
  appendName(t, client);
  appendName(t, server);
  return t;
}

}  // namespace

std::string encode(const Message& m) {
  std::string out(kMagic, 2);
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(m.step));
  switch (m.step) {
    case Step::kHello:
      out += m.nonce;
      appendName(out, m.name);
      break;
    case Step::kChallenge:
      out += m.nonce;
      out += m.mac;
      break;
    case Step::kProof:
      out += m.mac;
      break;
  }
  return out;
}

std::string decode(const char* data, size_t size, Message& out) {
  if (size > kMaxMessageBytes)
    return "a handshake message over " + std::to_string(kMaxMessageBytes) + " bytes";
  if (size < 4 || data[0] != kMagic[0] || data[1] != kMagic[1]) return "not a handshake message";
  if (static_cast<uint8_t>(data[2]) != kVersion) {
    return "handshake version " + std::to_string(static_cast<uint8_t>(data[2])) + ", expected " +
           std::to_string(kVersion);
  }
  const uint8_t step = static_cast<uint8_t>(data[3]);
  size_t at = 4;
  auto take = [&](size_t n, std::string& field) {
    if (size - at < n) return false;
    field.assign(data + at, n);
    at += n;
    return true;
  };
  out = Message{};
  switch (step) {
    case static_cast<uint8_t>(Step::kHello): {
      out.step = Step::kHello;
      std::string length;
      if (!take(kNonceBytes, out.nonce) || !take(2, length)) return "truncated hello";
      const size_t n = static_cast<uint8_t>(length[0]) | (static_cast<uint8_t>(length[1]) << 8);
      if (n == 0 || n > kMaxName) return "bad name length in hello";
      if (!take(n, out.name)) return "truncated hello";
      break;
    }
    case static_cast<uint8_t>(Step::kChallenge):
      out.step = Step::kChallenge;
      if (!take(kNonceBytes, out.nonce) || !take(kMacBytes, out.mac)) return "truncated challenge";
      break;
    case static_cast<uint8_t>(Step::kProof):
      out.step = Step::kProof;
      if (!take(kMacBytes, out.mac)) return "truncated proof";
      break;
    default:
      return "unknown handshake step " + std::to_string(step);
  }
  if (at != size) return "trailing bytes after a handshake message";
  return {};
}

const char* failureName(Failure failure) {
  switch (failure) {
    case Failure::kBadProof:
      return "bad_proof";
    case Failure::kUnauthenticated:
      return "unauthenticated";
    case Failure::kMalformed:
      return "malformed";
    case Failure::kTooLarge:
      return "too_large";
    case Failure::kTimeout:
      return "timeout";
    case Failure::kClosed:
      return "closed";
  }
  return "unknown";
}

std::string hmacSha256(const std::string& key, const std::string& data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac,
           &length) == nullptr) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(mac), length);
}

bool equalConstantTime(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string randomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    throw std::runtime_error("no random bytes for a handshake nonce");
  }
  return out;
}

std::string readSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("cannot read the job secret file " + path);
  std::string secret{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (secret.size() < kMinSecretBytes) {
    throw std::invalid_argument("the job secret file " + path + " holds " +
                                std::to_string(secret.size()) + " bytes; at least " +
                                std::to_string(kMinSecretBytes) + " are needed");
  }
  return secret;
}

ClientHandshake::ClientHandshake(const std::string& secret, std::string self, std::string server)
    : secret_(secret), self_(std::move(self)), server_(std::move(server)) {}

std::string ClientHandshake::hello() {
  nonce_ = randomBytes(kNonceBytes);
  Message m;
  m.step = Step::kHello;
  m.nonce = nonce_;
  m.name = self_;
  return encode(m);
}

std::optional<std::string> ClientHandshake::onChallenge(const char* data, size_t size,
                                                        Failure& why) {
  Message m;
  if (!decode(data, size, m).empty() || m.step != Step::kChallenge) {
    why = Failure::kMalformed;
    return std::nullopt;
  }
  const std::string expected =
      hmacSha256(secret_, transcript("server", nonce_, m.nonce, self_, server_));
  if (!equalConstantTime(expected, m.mac)) {
    why = Failure::kBadProof;
    return std::nullopt;
  }
  Message proof;
  proof.step = Step::kProof;
  proof.mac = hmacSha256(secret_, transcript("client", nonce_, m.nonce, self_, server_));
  return encode(proof);
}

ServerHandshake::ServerHandshake(const std::string& secret, std::string self)
    : secret_(secret), self_(std::move(self)) {}

std::optional<std::string> ServerHandshake::onHello(const char* data, size_t size,
                                                    const std::string& transportName,
                                                    Failure& why) {
  Message m;
  if (!decode(data, size, m).empty() || m.step != Step::kHello) {
    // rpcjob's own header magic: a peer that skipped authentication.
    why = size >= 2 && data[0] == 'R' && data[1] == 'J' ? Failure::kUnauthenticated
                                                        : Failure::kMalformed;
    return std::nullopt;
  }
  if (m.name != transportName) {
    why = Failure::kMalformed;
    return std::nullopt;
  }
  client_ = m.name;
  clientNonce_ = m.nonce;
  nonce_ = randomBytes(kNonceBytes);
  Message challenge;
  challenge.step = Step::kChallenge;
  challenge.nonce = nonce_;
  challenge.mac = hmacSha256(secret_, transcript("server", clientNonce_, nonce_, client_, self_));
  return encode(challenge);
}

bool ServerHandshake::onProof(const char* data, size_t size, Failure& why) {
  Message m;
  if (!decode(data, size, m).empty() || m.step != Step::kProof) {
    why = Failure::kMalformed;
    return false;
  }
  const std::string expected =
      hmacSha256(secret_, transcript("client", clientNonce_, nonce_, client_, self_));
  if (!equalConstantTime(expected, m.mac)) {
    why = Failure::kBadProof;
    return false;
  }
  return true;
}

}  // namespace rpcjob::auth
