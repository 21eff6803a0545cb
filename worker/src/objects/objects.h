#pragma once
// Remote objects on the owner's side: registered classes' instances live in
// IValues as capsules (ObjectHolder), and method calls reach them through the
// built-in function kBuiltinMethod. Public API: rpcjob/runtime/remote_object.h.

#include <ATen/core/ivalue.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rpcjob/runtime/remote_object.h"

namespace rpcjob::runtime {
class RuntimeImpl;
struct OwnerEntry;

namespace objects {

struct ObjectHolder : torch::CustomClassHolder {
  ObjectHolder(std::shared_ptr<const detail::ClassDef> c, std::shared_ptr<void> o)
      : cls(std::move(c)), object(std::move(o)) {}
  std::shared_ptr<const detail::ClassDef> cls;
  std::shared_ptr<void> object;
  std::mutex mu;  // cls->options.serializeCalls
};

// Registers kBuiltinMethod (every runtime serves it: an RRef to a plain value
// gets a clear error, not "unknown function").
void registerBuiltins(RuntimeImpl& rt);

// Calls `method` of the object `value` holds (throws RpcError for anything
// else, an unknown method, or an exception from the method).
c10::IValue invokeMethod(const c10::IValue& value, const std::string& method, const CallInfo& info,
                         std::vector<c10::IValue> args);

// A method call on an object owned here, once its value exists (on the pool).
Future callOwned(RuntimeImpl& rt, const std::shared_ptr<OwnerEntry>& entry,
                 const std::string& method, std::vector<c10::IValue> args);

}  // namespace objects
}  // namespace rpcjob::runtime
