// libFuzzer target for the authentication handshake (worker/src/auth/): what an
// unauthenticated peer can make a worker decode. Any crash, hang or sanitizer
// report is a bug; a refusal is the expected outcome. A decoded message must
// re-encode to the same bytes, and no input may be admitted without the secret.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "auth/handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rpcjob::auth;
  const char* bytes = reinterpret_cast<const char*>(data);
  Message m;
  if (decode(bytes, size, m).empty() && encode(m) != std::string(bytes, size)) std::abort();

  // The input as the server's hello and then as its proof, and as the client's
  // challenge: refused unless it is a hello (which only earns a challenge).
  const std::string secret(32, 's');
  Failure why;
  ServerHandshake server(secret, "w1");
  auto challenge = server.onHello(bytes, size, "hostile", why);
  if (challenge && server.onProof(bytes, size, why)) std::abort();  // admitted blind
  ClientHandshake client(secret, "w0", "w1");
  client.hello();
  if (client.onChallenge(bytes, size, why)) std::abort();  // a random MAC matched
  return 0;
}
