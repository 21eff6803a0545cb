#pragma once
// Splits a worker's output stream into lines and prefixes each with the worker's
// name ("[peer0] ..."), so that the interleaved output of many workers stays
// readable. Bytes arrive in arbitrary chunks; only complete lines come out, except
// at the end of the stream (flush) or when a line grows past kMaxLine bytes (a
// worker printing a progress bar without newlines must not grow memory forever).
//
// Thread-safety: none; one prefixer per stream.

#include <cstddef>
#include <string>
#include <string_view>

namespace rpcjob::runner {

class LinePrefixer {
 public:
  static constexpr std::size_t kMaxLine = 64 * 1024;

  explicit LinePrefixer(std::string prefix) : prefix_(std::move(prefix)) {}

  // The complete lines in pending output + `bytes`, each prefixed and ending in '\n'.
  std::string feed(std::string_view bytes);
  // The unterminated rest, prefixed and terminated; "" when there is none.
  std::string flush();

 private:
  std::string prefix_;
  std::string pending_;
};

}  // namespace rpcjob::runner
