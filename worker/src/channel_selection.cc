#include "channel_selection.h"

#include <tensorpipe/tensorpipe.h>
#include <set>

namespace rpcjob::runtime {
namespace {

const char kTransportPrefix[] = "transport:";

const wire::DeviceDescriptors* findRemote(const wire::ChannelDescriptors& remote,
                                          const std::string& name) {
  for (const auto& [channel, devices] : remote) {
    if (channel == name) return &devices;
  }
  return nullptr;
}

}  // namespace

wire::ChannelDescriptors localDescriptors(const Registry& registry) {
  wire::ChannelDescriptors out;
  for (const auto& channel : registry.channels) {
    wire::DeviceDescriptors devices;
    for (const auto& [device, descriptor] : channel.context->deviceDescriptors()) {
      devices.emplace_back(device.toString(), descriptor);
    }
    out.emplace_back(channel.name, std::move(devices));
  }
  for (const auto& transport : registry.transports) {
    out.emplace_back(kTransportPrefix + transport.name,
                     wire::DeviceDescriptors{{"domain", transport.context->domainDescriptor()}});
  }
  return out;
}

std::vector<SelectedChannel> selectChannels(const Registry& registry,
                                            const wire::ChannelDescriptors& remote) {
  std::vector<SelectedChannel> out;
  std::set<std::pair<std::string, std::string>> taken;
  for (const auto& channel : registry.channels) {  // highest priority first
    const wire::DeviceDescriptors* remoteDevices = findRemote(remote, channel.name);
    if (remoteDevices == nullptr) continue;
    for (const auto& [localDevice, localDescriptor] : channel.context->deviceDescriptors()) {
      for (const auto& [remoteDevice, remoteDescriptor] : *remoteDevices) {
        // The method is documented as symmetric; asking both ways is what "both
        // sides accept" means when only one side's context is at hand.
        if (!channel.context->canCommunicateWithRemote(localDescriptor, remoteDescriptor) ||
            !channel.context->canCommunicateWithRemote(remoteDescriptor, localDescriptor)) {
          continue;
        }
        if (!taken.insert({localDevice.toString(), remoteDevice}).second) continue;
        out.push_back({localDevice.toString(), remoteDevice, channel.name});
      }
    }
  }
  return out;
}

std::string selectTransport(const Registry& registry, const wire::ChannelDescriptors& remote) {
  for (const auto& transport : registry.transports) {
    const wire::DeviceDescriptors* remoteDomain =
        findRemote(remote, kTransportPrefix + transport.name);
    if (remoteDomain == nullptr || remoteDomain->empty()) continue;
    if (transport.context->canCommunicateWithRemote(remoteDomain->front().second)) {
      return transport.name;
    }
  }
  return {};
}

}  // namespace rpcjob::runtime
