#pragma once
// TensorPipe does not say which channel a pipe uses for a pair of devices. It
// decides in the pipe handshake: going through its channels from the highest
// priority down, the first channel registered on both sides whose context can
// communicate between the local and the remote device descriptors wins the pair.
// The runtime exchanges the same descriptors in its own handshake and applies
// the same rule here, so it can report the choice (and metrics can label by it).
// Transports follow the same rule with their domain descriptors.

#include <string>
#include <vector>

#include "header_codec.h"
#include "tensorpipe_registry.h"

namespace rpcjob::runtime {

// What we send in the handshake: every channel's device descriptors, and every
// transport as a "transport:<name>" entry with one ("domain", descriptor) pair.
wire::ChannelDescriptors localDescriptors(const Registry& registry);

struct SelectedChannel {
  std::string localDevice;
  std::string remoteDevice;
  std::string channel;
};

std::vector<SelectedChannel> selectChannels(const Registry& registry,
                                            const wire::ChannelDescriptors& remote);
std::string selectTransport(const Registry& registry, const wire::ChannelDescriptors& remote);

}  // namespace rpcjob::runtime
