// libFuzzer target for everything a peer can make the runtime decode before any
// libtorch code sees it. Any crash, hang or sanitizer report is a bug; an error
// string is the expected outcome for malformed input.
#include <cstddef>
#include <cstdint>

#include "header_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  rpcjob::wire::Header header;
  if (rpcjob::wire::decodeHeader(bytes, size, header).empty()) {
    // What decodes must re-encode to something that decodes to the same header.
    std::string again = rpcjob::wire::encodeHeader(header);
    rpcjob::wire::Header second;
    if (!rpcjob::wire::decodeHeader(again.data(), again.size(), second).empty() ||
        second.id != header.id || second.function != header.function) {
      __builtin_trap();
    }
  }
  rpcjob::wire::TensorMeta meta;
  (void)rpcjob::wire::decodeTensorMeta(bytes, size, meta);
  rpcjob::wire::ChannelDescriptors descriptors;
  (void)rpcjob::wire::decodeChannelDescriptors(bytes, size, descriptors);
  return 0;
}
