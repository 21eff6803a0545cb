#pragma once
// The Context side of rpcjob's copy channels (copy_channel.h): one connection per
// channel, device descriptors fixed at construction, and close() closing every
// channel made (TensorPipe expects a context to, and ours track their own).

#include "copy_channel.h"
#include "open_channels.h"

#include <tensorpipe/channel/context.h>
#include <tensorpipe/common/device.h>
#include <tensorpipe/transport/connection.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace rpcjob::runtime::channels {

class CopyContext : public tensorpipe::channel::Context {
 public:
  bool isViable() const final { return viable_; }
  size_t numConnectionsNeeded() const final { return 1; }
  const std::unordered_map<tensorpipe::Device, std::string>& deviceDescriptors() const final {
    return descriptors_;
  }
  std::shared_ptr<tensorpipe::channel::Channel> createChannel(
      std::vector<std::shared_ptr<tensorpipe::transport::Connection>> connections,
      tensorpipe::channel::Endpoint) final;
  void setId(std::string) final {}
  void close() final;
  void join() override { close(); }

 protected:
  // A context that never calls this stays not viable, so TensorPipe never uses it.
  void setViable(std::unordered_map<tensorpipe::Device, std::string> descriptors);

 private:
  virtual std::shared_ptr<CopyChannelBase> makeChannel(
      std::shared_ptr<tensorpipe::transport::Connection> connection) = 0;

  bool viable_ = false;
  std::unordered_map<tensorpipe::Device, std::string> descriptors_;
  OpenChannels channels_;
};

}  // namespace rpcjob::runtime::channels
