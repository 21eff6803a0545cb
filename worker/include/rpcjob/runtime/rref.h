#pragma once
// A remote reference: a value that lives on its owner worker (PyTorch's RRef).
//
// Runtime::remote() returns a user RRef on the caller; Runtime::makeRRef(value)
// makes one owned here (Python's RRef(x)). The owner keeps the value in an owner
// RRef until every user reference, on every worker, is gone (PyTorch's protocol:
// the owner counts forks; a fork sent by a non-owner is confirmed with the owner
// before its sender lets go of it). Copies of an RRef object share one
// reference; the last copy's destruction releases it.
//
// RRefs are values: toIValue() wraps one in an IValue, which may go anywhere in
// call arguments and results (also inside lists, tuples and dicts); the runtime
// forks it when the message is sent and the receiver finds an RRef in its place
// (fromIValue()). A value an RRef owns may itself hold RRefs.
//
// Proxies (PyTorch's rref.rpc_sync() / rpc_async() / remote()): when the owned
// value is a remote object (remote_object.h), rpcSync / rpcAsync / remote call
// one of its methods on the owner.
//
// Thread safety: all methods may be called from any thread.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/runtime/future.h"
#include "rpcjob/runtime/ivalue_fwd.h"
#include "rpcjob/runtime/options.h"

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
  // Completes once the owner has created the value and registered this
  // reference (or failed to).
  Future confirmed() const;

  // Copies the value here: from the owner by RPC, or locally on the owner.
  // A timeout of zero: the runtime's default; negative: none.
  Future toHereAsync(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) const;
  c10::IValue toHere(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) const;
  // The value itself, only on the owner (throws RpcError elsewhere); waits for
  // it to be created.
  const c10::IValue& localValue() const;

  // Calls method `method` of the remote object this RRef owns, on its owner:
  // the result, a future of it, or an RRef to it owned by the same owner.
  // rpcSync and toHere wait as Runtime::rpcSync does (CUDA tensors on the
  // current streams, not the host).
  c10::IValue rpcSync(const std::string& method, std::vector<c10::IValue> args = {},
                      CallOptions options = {}) const;
  Future rpcAsync(const std::string& method, std::vector<c10::IValue> args = {},
                  CallOptions options = {}) const;
  RRef remote(const std::string& method, std::vector<c10::IValue> args = {},
              CallOptions options = {}) const;

  // This RRef as a value, to put among call arguments or results (forked when
  // sent), or in a value another RRef owns.
  c10::IValue toIValue() const;
  // The RRef in a value made by toIValue() (or received in its place); throws
  // RpcError (kInvalidArgument) for any other value.
  static RRef fromIValue(const c10::IValue& value);
  static bool isRRef(const c10::IValue& value);

  explicit RRef(std::shared_ptr<detail::RRefHandle> handle);
  const std::shared_ptr<detail::RRefHandle>& handle() const { return handle_; }

 private:
  std::shared_ptr<detail::RRefHandle> handle_;
};

}  // namespace rpcjob::runtime
