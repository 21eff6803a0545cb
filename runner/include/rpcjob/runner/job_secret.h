#pragma once
// The secret of one `rpcjob run`: 32 random bytes (getrandom) in <runDir>/secret,
// mode 0600, which every worker reads through RPCJOB_SECRET_FILE to authenticate
// its pipes (worker/src/auth/). A new one per run: a process of an earlier run,
// or any other local process, cannot call this run's workers.

#include <string>

namespace rpcjob::runner {

inline constexpr std::size_t kJobSecretBytes = 32;

// Writes a fresh secret to `path`, replacing a previous file (never following a
// link there). Throws std::runtime_error with the path (never the bytes).
void writeJobSecret(const std::string& path);

}  // namespace rpcjob::runner
