#include "rpcjob/runner/line_prefixer.h"

namespace rpcjob::runner {

std::string LinePrefixer::feed(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    if (c == '\n') {
      out += prefix_ + pending_ + '\n';
      pending_.clear();
      continue;
    }
    pending_ += c;
    if (pending_.size() >= kMaxLine) {
      out += prefix_ + pending_ + '\n';
      pending_.clear();
    }
  }
  return out;
}

std::string LinePrefixer::flush() {
  if (pending_.empty()) return "";
  std::string out = prefix_ + pending_ + '\n';
  pending_.clear();
  return out;
}

}  // namespace rpcjob::runner
