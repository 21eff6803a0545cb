#include "lane_transfer_meter.h"

#include <cuda_runtime.h>
#include <rpcjob/instrument/instrument.h>
#include <rpcjob/metrics/channel_metrics.h>
#include <tensorpipe/common/buffer.h>
#include <tensorpipe/common/cuda_buffer.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace rpcjob::telemetry {
namespace {

class LaneTransferMeter final : public runtime::DeviceTransferObserver {
 public:
  LaneTransferMeter(metrics::ChannelMetrics& channels,
                    std::shared_ptr<instrument::TransferTimer> timer)
      : channels_(channels), timer_(std::move(timer)) {}

  std::uint64_t started(const runtime::DeviceTransfer& t) noexcept override {
    try {
      metrics::TransferLabels labels;
      labels.channel = runtime::kLaneChannel;
      labels.direction = t.send ? metrics::Direction::kSend : metrics::Direction::kRecv;
      labels.peer = t.peer;
      labels.localDevice = "cuda:" + std::to_string(t.localDevice);
      labels.remoteDevice = "cuda:" + std::to_string(t.remoteDevice);
      Begun begun{&channels_.transfer(labels), t.bytes, 0};
      begun.timerToken = timer_->begin(
          tensorpipe::Buffer(tensorpipe::CudaBuffer{t.ptr, static_cast<cudaStream_t>(t.stream)}));
      std::lock_guard<std::mutex> lock(mu_);
      const std::uint64_t token = next_++;
      begun_.emplace(token, begun);
      return token;
    } catch (...) {
      return 0;  // not counted: metrics never fail a transfer
    }
  }

  void finished(std::uint64_t token, bool ok) noexcept override {
    Begun begun;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = begun_.find(token);
      if (it == begun_.end()) return;
      begun = it->second;
      begun_.erase(it);
    }
    if (ok) {
      timer_->end(begun.timerToken, instrument::TransferReport{begun.handles, begun.bytes});
    } else {
      begun.handles->recordError();  // the timer gives a token never ended back itself
    }
  }

  void cancelled(std::uint64_t token) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    begun_.erase(token);  // its timer token too is given back as never ended
  }

 private:
  struct Begun {
    const metrics::TransferHandles* handles = nullptr;
    std::size_t bytes = 0;
    std::uint64_t timerToken = 0;
  };

  metrics::ChannelMetrics& channels_;
  std::shared_ptr<instrument::TransferTimer> timer_;
  std::mutex mu_;
  std::uint64_t next_ = 1;
  std::unordered_map<std::uint64_t, Begun> begun_;
};

}  // namespace

std::shared_ptr<runtime::DeviceTransferObserver> makeLaneTransferMeter(
    metrics::ChannelMetrics& channels, std::shared_ptr<instrument::TransferTimer> timer) {
  return std::make_shared<LaneTransferMeter>(channels, std::move(timer));
}

}  // namespace rpcjob::telemetry
