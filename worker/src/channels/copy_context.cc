#include "copy_context.h"

#include <utility>

namespace rpcjob::runtime::channels {

std::shared_ptr<tensorpipe::channel::Channel> CopyContext::createChannel(
    std::vector<std::shared_ptr<tensorpipe::transport::Connection>> connections,
    tensorpipe::channel::Endpoint) {
  auto channel = makeChannel(std::move(connections.at(0)));
  const bool open = channels_.add(channel);
  channel->start();
  if (!open) channel->close();
  return channel;
}

void CopyContext::close() {
  channels_.closeAll();
}

void CopyContext::setViable(std::unordered_map<tensorpipe::Device, std::string> descriptors) {
  descriptors_ = std::move(descriptors);
  viable_ = true;
}

}  // namespace rpcjob::runtime::channels
