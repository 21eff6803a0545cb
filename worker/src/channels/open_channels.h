#pragma once
// The channels a context of our own created and must close when it closes
// (TensorPipe's channel::Context::close() closes every channel it made). Held by
// CopyContext (copy_context.h) for rpcjob's channels. Thread-safe.

#include <tensorpipe/channel/channel.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

namespace rpcjob::runtime {

class OpenChannels {
 public:
  // Remembers `channel` (weakly: a channel TensorPipe dropped is not kept alive, and
  // expired entries are pruned here, so the list does not grow with reconnections).
  // Returns false when closeAll() already ran: the caller must close the channel.
  bool add(const std::shared_ptr<tensorpipe::channel::Channel>& channel) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    channels_.erase(std::remove_if(channels_.begin(), channels_.end(),
                                   [](const auto& weak) { return weak.expired(); }),
                    channels_.end());
    channels_.push_back(channel);
    return true;
  }

  // Closes every channel still alive, once; outside the lock, since a channel's
  // close() may call back into its context.
  void closeAll() {
    std::vector<std::shared_ptr<tensorpipe::channel::Channel>> open;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      for (auto& weak : channels_) {
        if (auto c = weak.lock()) open.push_back(std::move(c));
      }
      channels_.clear();
    }
    for (auto& c : open) c->close();
  }

 private:
  std::mutex mu_;
  bool closed_ = false;
  std::vector<std::weak_ptr<tensorpipe::channel::Channel>> channels_;
};

}  // namespace rpcjob::runtime
