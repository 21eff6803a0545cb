#pragma once
// Pipe authentication: a challenge-response over fresh nonces from both sides,
// each side proving with an HMAC-SHA256 under the job's secret that it holds it.
//
//   client -> server  Hello     { client nonce Nc, client name }
//   server -> client  Challenge { server nonce Ns, MAC(K, "server" | Nc | Ns | names) }
//   client -> server  Proof     { MAC(K, "client" | Nc | Ns | names) }
//
// Both nonces bind each proof to this one handshake (a recorded one does not
// replay: the other side's nonce is new); the role label and both names keep a
// proof from being reflected back at its author or relayed to another worker.
// Nothing but these three messages is read before the proofs check out.
//
// Message layout (a TensorPipe message's metadata, no payload, no tensors):
//   "RA" magic (2) | version u8 | step u8 | then per step:
//   kHello: nonce (32) | name (u16 length + bytes) ; kChallenge: nonce (32) | mac (32) ;
//   kProof: mac (32)
//
// Pure logic, no I/O and no TensorPipe (pipe_gate.h runs it on pipes); the
// decoder is fuzzed (worker/fuzz/auth_handshake_fuzzer.cc). The secret is never
// part of an error string.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rpcjob::auth {

inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kMaxName = 253;  // a DNS name; worker names are shorter
// The largest handshake message: anything larger is refused unread.
inline constexpr size_t kMaxMessageBytes = 4 + kNonceBytes + 2 + kMaxName;
// A shorter secret is a configuration error (the runner and operator make 32 bytes).
inline constexpr size_t kMinSecretBytes = 16;

enum class Step : uint8_t { kHello = 1, kChallenge = 2, kProof = 3 };

struct Message {
  Step step = Step::kHello;
  std::string nonce;  // kHello, kChallenge
  std::string mac;    // kChallenge, kProof
  std::string name;   // kHello
};

std::string encode(const Message& message);
// Empty on success, else what is wrong.
std::string decode(const char* data, size_t size, Message& out);

// Why a handshake failed: the metric's `reason` label.
enum class Failure {
  kBadProof,         // a MAC did not match: another secret, a replay, a reflection
  kUnauthenticated,  // the peer spoke rpcjob's protocol without authenticating
  kMalformed,        // not a handshake message, or one out of order
  kTooLarge,         // a message larger than any handshake message
  kTimeout,          // no complete handshake within the bound
  kClosed,           // the peer went away mid-handshake
};
const char* failureName(Failure failure);

// HMAC-SHA256 (OpenSSL libcrypto), constant-time equality and random bytes.
std::string hmacSha256(const std::string& key, const std::string& data);
bool equalConstantTime(const std::string& a, const std::string& b);
std::string randomBytes(size_t n);  // throws std::runtime_error if the system has none

// The job secret from a file (RPCJOB_SECRET_FILE). Throws std::invalid_argument
// naming the path (never the content) when it cannot be read or is too short.
std::string readSecretFile(const std::string& path);

// The dialling side. hello() first, then the server's answer to onChallenge().
class ClientHandshake {
 public:
  ClientHandshake(const std::string& secret, std::string self, std::string server);
  std::string hello();
  // The proof to send, or nothing (and `why`) when the server did not prove
  // that it holds the secret.
  std::optional<std::string> onChallenge(const char* data, size_t size, Failure& why);

 private:
  const std::string& secret_;
  std::string self_, server_, nonce_;
};

// The accepting side: the client's hello to onHello(), then its proof to onProof().
class ServerHandshake {
 public:
  ServerHandshake(const std::string& secret, std::string self);
  // `transportName`: the name the peer gave TensorPipe; the hello must agree.
  std::optional<std::string> onHello(const char* data, size_t size,
                                     const std::string& transportName, Failure& why);
  bool onProof(const char* data, size_t size, Failure& why);

 private:
  const std::string& secret_;
  std::string self_, client_, clientNonce_, nonce_;
};

}  // namespace rpcjob::auth
