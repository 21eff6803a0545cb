#pragma once
// A remote reference: a value that lives on its owner worker (PyTorch's RRef).
//
// remote() returns a user RRef on the caller; the owner keeps the value in an
// owner RRef until every user reference, on every worker, is gone (PyTorch's
// protocol: the owner counts forks; a fork sent by a non-owner is confirmed with
// the owner before its sender lets go of it). Copies of an RRef object share one
// reference; the last copy's destruction releases it.
//
// Passing an RRef to a third worker: put rref.toIValue() among the call's
// arguments (it forks the reference); the receiving function turns it back into
// an RRef with Runtime::rrefFromIValue().
//
// Thread safety: all methods may be called from any thread.

#include <memory>
#include <string>

#include "rpcjob/runtime/future.h"
#include "rpcjob/runtime/ivalue_fwd.h"

namespace rpcjob::runtime {

namespace detail {
class RRefHandle;
}

class RRef {
 public:
  RRef() = default;
  bool valid() const { return handle_ != nullptr; }
  const std::string& owner() const;
  bool isOwner() const;  // this worker owns the value
  // "worker:local" of the RRef (the same on every worker).
  std::string id() const;
  // Completes once the owner has created the value (or failed to).
  Future confirmed() const;

  // Copies the value here: from the owner by RPC, or locally on the owner.
  Future toHereAsync() const;
  c10::IValue toHere() const;
  // The value itself, only on the owner (throws RpcError elsewhere).
  const c10::IValue& localValue() const;

  // A fork of this reference for another worker, to send among call arguments.
  c10::IValue toIValue() const;

  explicit RRef(std::shared_ptr<detail::RRefHandle> handle);

 private:
  std::shared_ptr<detail::RRefHandle> handle_;
};

}  // namespace rpcjob::runtime
