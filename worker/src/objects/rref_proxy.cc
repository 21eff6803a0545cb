// RRef proxies: rref.rpcSync / rpcAsync / remote call a method of the remote
// object on its owner (PyTorch's rref.rpc_sync().method(...)).
#include "objects/objects.h"
#include "rpcjob/runtime/rref.h"
#include "runtime_impl.h"

namespace rpcjob::runtime {
namespace {

// The arguments of kBuiltinMethod.
std::vector<c10::IValue> methodArgs(const detail::RRefHandle& h, const std::string& method,
                                    std::vector<c10::IValue>& args) {
  std::vector<c10::IValue> full;
  full.reserve(args.size() + 3);
  full.emplace_back(static_cast<int64_t>(h.rrefId.worker));
  full.emplace_back(static_cast<int64_t>(h.rrefId.local));
  full.emplace_back(method);
  for (auto& a : args) full.push_back(std::move(a));
  return full;
}

std::shared_ptr<RuntimeImpl> runtimeOf(const std::shared_ptr<detail::RRefHandle>& h) {
  if (!h) throw RpcError(ErrorCode::kInvalidArgument, "", "an empty RRef");
  auto rt = h->runtime.lock();
  if (!rt) throw RpcError(ErrorCode::kShutdown, h->ownerName, "the runtime is gone");
  return rt;
}

}  // namespace

Future RRef::rpcAsync(const std::string& method, std::vector<c10::IValue> args,
                      CallOptions options) const {
  auto rt = runtimeOf(handle_);
  if (handle_->isOwner) return objects::callOwned(*rt, handle_->entry, method, std::move(args));
  Future f =
      rt->rpcAsync(handle_->ownerName, kBuiltinMethod, methodArgs(*handle_, method, args), options);
  // The owner keeps the object while the call runs: our reference lives until
  // the answer (a delete would follow the call on the same pipe anyway).
  f.addInlineCallback([keep = handle_](const Future&) {});
  return f;
}

c10::IValue RRef::rpcSync(const std::string& method, std::vector<c10::IValue> args,
                          CallOptions options) const {
  return rpcAsync(method, std::move(args), options).valueOnStreams();
}

RRef RRef::remote(const std::string& method, std::vector<c10::IValue> args,
                  CallOptions options) const {
  auto rt = runtimeOf(handle_);
  if (handle_->isOwner) {
    return rt->ownedRRef(objects::callOwned(*rt, handle_->entry, method, std::move(args)));
  }
  RRef result =
      rt->remote(handle_->ownerName, kBuiltinMethod, methodArgs(*handle_, method, args), options);
  result.confirmed().addInlineCallback([keep = handle_](const Future&) {});
  return result;
}

}  // namespace rpcjob::runtime
