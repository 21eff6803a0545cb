#pragma once
// The one place where the runtime creates TensorPipe transport and channel
// contexts and registers them with its tensorpipe::Context. The wrapper hooks
// (rpcjob/runtime/tensorpipe_hooks.h) see every context before it is registered,
// so instrumentation can decorate all of them.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/runtime/tensorpipe_hooks.h"

namespace tensorpipe {
class Context;
}

namespace rpcjob::runtime {

inline const std::vector<std::string> kDefaultTransports = {"shm", "ibv", "uv"};
// rpcjob_cma (channels/mtcma/): cma with the copy split over a thread pool.
inline const std::vector<std::string> kDefaultChannels = {"rpcjob_cma", "cma", "mpt", "xth",
                                                          "basic"};

struct RegisteredTransport {
  std::string name;
  int64_t priority;
  std::shared_ptr<tensorpipe::transport::Context> context;  // as registered (wrapped)
};
struct RegisteredChannel {
  std::string name;
  int64_t priority;
  std::shared_ptr<tensorpipe::channel::Context> context;  // as registered (wrapped)
};
struct Registry {
  std::vector<RegisteredTransport> transports;  // highest priority first
  std::vector<RegisteredChannel> channels;      // highest priority first
  std::vector<std::string> skipped;             // "name: why", for the log
};

// Creates the allowed transports and channels (empty list: the defaults) that
// are viable here, wraps each with the hooks when set, and registers them with
// priorities falling in list order. `host` is the IP the mpt lanes listen on.
// Throws std::invalid_argument on an unknown name or when no transport is viable.
Registry registerTensorpipeContexts(tensorpipe::Context& context,
                                    const std::vector<std::string>& transports,
                                    const std::vector<std::string>& channels,
                                    const std::string& host, int mptLanes,
                                    const TransportWrapper& wrapTransport,
                                    const ChannelWrapper& wrapChannel);

}  // namespace rpcjob::runtime
