#pragma once

// The id TensorPipe gives a decorated context (Context::setId). Its channels and
// connections need it to read their peer out of their own ids (peer_id.h), and
// learn those ids on other threads, possibly before the context has its own.

#include <mutex>
#include <string>
#include <utility>

#include "rpcjob/instrument/peer_id.h"

namespace rpcjob {
namespace instrument {

class ContextId {
 public:
  // From the id TensorPipe gives the context registered as `name`.
  void set(const std::string& id, const std::string& name) {
    std::string contextId = contextIdFromId(id, name);
    std::lock_guard<std::mutex> lock(mutex_);
    id_ = std::move(contextId);
  }

  // The peer a channel's or connection's own id names ("" for none).
  std::string peerOf(const std::string& id) const {
    std::string contextId;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      contextId = id_;
    }
    return peerFromId(contextId, id);
  }

 private:
  mutable std::mutex mutex_;
  std::string id_;
};

}  // namespace instrument
}  // namespace rpcjob
