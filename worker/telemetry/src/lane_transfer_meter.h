#pragma once
// Per-channel metrics for the CUDA tensors two workers trade as IPC handles on
// their shared-memory lane (runtime/device_transfers.h): channel "cuda_lane",
// timed with CUDA events on the transfers' streams as the CUDA channels are
// (cuda_event_timer.h). CUDA build with the instrumentation only.

#include <memory>

#include "rpcjob/runtime/device_transfers.h"

namespace rpcjob::metrics {
class ChannelMetrics;
}
namespace rpcjob::instrument {
class TransferTimer;
}

namespace rpcjob::telemetry {

std::shared_ptr<runtime::DeviceTransferObserver> makeLaneTransferMeter(
    metrics::ChannelMetrics& channels, std::shared_ptr<instrument::TransferTimer> timer);

}  // namespace rpcjob::telemetry
