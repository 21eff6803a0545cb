#pragma once
// The seam through which the instrumentation (worker/instrument/) wraps every
// TensorPipe transport and channel context the runtime creates. Every context is
// created in one function (worker/src/tensorpipe_registry.cc) which, when a hook
// is set, registers whatever the hook returns under the same name and priority.
//
// This is the only public header that names TensorPipe types, and only by
// forward declaration: include it where you build wrappers, which include
// TensorPipe themselves.

#include <functional>
#include <memory>
#include <string>

namespace tensorpipe {
namespace channel {
class Context;
}
namespace transport {
class Context;
}
}  // namespace tensorpipe

namespace rpcjob::runtime {

class DeviceTransferObserver;  // device_transfers.h

// (name, context) -> context to register (the same one, or a decorator of it).
using ChannelWrapper = std::function<std::shared_ptr<tensorpipe::channel::Context>(
    const std::string& name, std::shared_ptr<tensorpipe::channel::Context> context)>;
using TransportWrapper = std::function<std::shared_ptr<tensorpipe::transport::Context>(
    const std::string& name, std::shared_ptr<tensorpipe::transport::Context> context)>;

struct TensorpipeHooks {
  ChannelWrapper wrapChannel;      // empty: register as created
  TransportWrapper wrapTransport;  // empty: register as created
  // CUDA tensors that bypass TensorPipe (device_transfers.h); null: not counted.
  std::shared_ptr<DeviceTransferObserver> deviceTransfers;
};

}  // namespace rpcjob::runtime
