#include "tensorpipe_registry.h"

#include <tensorpipe/tensorpipe.h>
#include <stdexcept>

#include "channels/mtcma/mtcma_channel.h"
#include "nop_guard.h"
#if RPCJOB_WITH_CUDA
#include "cuda/cuda_channels.h"
#endif

namespace rpcjob::runtime {
namespace {

std::shared_ptr<tensorpipe::transport::Context> createTransport(const std::string& name) {
  if (name == "uv") return tensorpipe::transport::uv::create();
  if (name == "shm") return tensorpipe::transport::shm::create();
  if (name == "ibv") return tensorpipe::transport::ibv::create();
  throw std::invalid_argument("unknown transport '" + name + "' (known: shm, ibv, uv)");
}

std::shared_ptr<tensorpipe::channel::Context> createChannel(const std::string& name,
                                                            const std::string& host, int mptLanes,
                                                            std::string& why) {
#if RPCJOB_WITH_CUDA
  if (cuda::isCudaChannel(name)) return cuda::createCudaChannel(name, why);
#else
  why = "not in this build";
#endif
  if (name == "basic") return tensorpipe::channel::basic::create();
  if (name == "xth") {
#if RPCJOB_HAS_XTH_CHANNEL
    return tensorpipe::channel::xth::create();
#else
    why = "not in this build";
    return nullptr;  // PyTorch's libtorch does not export it
#endif
  }
  if (name == "cma") return tensorpipe::channel::cma::create();
  if (name == channels::kMtCmaChannelName) return channels::createMtCmaChannel();
  if (name == "mpt") {
    // mpt stripes a tensor over several uv connections ("lanes"), each with its
    // own loop thread, so large CPU transfers between hosts use several cores.
    std::vector<std::shared_ptr<tensorpipe::transport::Context>> contexts;
    std::vector<std::shared_ptr<tensorpipe::transport::Listener>> listeners;
    // The lanes' connections read nop objects (mpt's hello) too: guarded.
    for (int i = 0; i < (mptLanes < 1 ? 1 : mptLanes); ++i) {
      auto lane = guardNopReads(tensorpipe::transport::uv::create());
      listeners.push_back(lane->listen(host));
      contexts.push_back(std::move(lane));
    }
    return tensorpipe::channel::mpt::create(std::move(contexts), std::move(listeners));
  }
  throw std::invalid_argument("unknown channel '" + name +
                              "' (known: rpcjob_cma, cma, mpt, xth, basic, cuda_xth, cuda_nvlink, "
                              "cuda_ipc, cuda_gdr, cuda_basic)");
}

int64_t priorityAt(size_t index, size_t count) {
  return static_cast<int64_t>(count - index) * 100;
}

}  // namespace

Registry registerTensorpipeContexts(tensorpipe::Context& context,
                                    const std::vector<std::string>& transports,
                                    const std::vector<std::string>& channels,
                                    const std::string& host, int mptLanes,
                                    const TransportWrapper& wrapTransport,
                                    const ChannelWrapper& wrapChannel) {
  Registry registry;
  const auto& transportNames = transports.empty() ? kDefaultTransports : transports;
#if RPCJOB_WITH_CUDA
  std::vector<std::string> defaults = kDefaultChannels;
  defaults.insert(defaults.end(), cuda::kCudaChannels.begin(), cuda::kCudaChannels.end());
  const auto& channelNames = channels.empty() ? defaults : channels;
#else
  const auto& channelNames = channels.empty() ? kDefaultChannels : channels;
#endif
  for (size_t i = 0; i < transportNames.size(); ++i) {
    const std::string& name = transportNames[i];
    auto created = createTransport(name);
    if (!created->isViable()) {
      registry.skipped.push_back(name + ": not viable on this host");
      continue;
    }
    // Malformed control bytes fail the connection instead of aborting (nop_guard.h).
    created = guardNopReads(std::move(created));
    if (wrapTransport) created = wrapTransport(name, std::move(created));
    int64_t priority = priorityAt(i, transportNames.size());
    context.registerTransport(priority, name, created);
    registry.transports.push_back({name, priority, std::move(created)});
  }
  if (registry.transports.empty()) {
    throw std::invalid_argument("no viable transport among the allowed ones");
  }
  for (size_t i = 0; i < channelNames.size(); ++i) {
    const std::string& name = channelNames[i];
    std::string why;
    auto created = createChannel(name, host, mptLanes, why);
    if (!created) {
      registry.skipped.push_back(name + ": " + why);
      continue;
    }
    if (!created->isViable()) {
      // cma, for one, needs ptrace permission between the processes (CAP_SYS_PTRACE
      // or a permissive Yama scope); without it TensorPipe would fail transfers.
      registry.skipped.push_back(name + ": not viable on this host");
      continue;
    }
    if (wrapChannel) created = wrapChannel(name, std::move(created));
    int64_t priority = priorityAt(i, channelNames.size());
    context.registerChannel(priority, name, created);
    registry.channels.push_back({name, priority, std::move(created)});
  }
  if (registry.channels.empty()) {
    throw std::invalid_argument("no viable channel among the allowed ones");
  }
  return registry;
}

}  // namespace rpcjob::runtime
