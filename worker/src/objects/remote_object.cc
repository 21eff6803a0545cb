// Registered classes and the owner's side of method calls.
#include "rpcjob/runtime/remote_object.h"

#include <c10/util/Exception.h>

#include "objects/objects.h"
#include "runtime_impl.h"

namespace rpcjob::runtime {
namespace {

std::string idString(const GloballyUniqueId& id) {
  return std::to_string(id.worker) + ":" + std::to_string(id.local);
}

// Runs user code (a constructor, a method) and reports its failure as an
// RpcError naming what failed: libtorch's errors without their C++ backtrace.
template <class F>
c10::IValue runUserCode(const std::string& worker, const std::string& what, F f) {
  try {
    return f();
  } catch (const RpcError&) {
    throw;
  } catch (const c10::Error& e) {
    throw RpcError(ErrorCode::kRemoteException, worker, what + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw RpcError(ErrorCode::kRemoteException, worker, what + ": " + e.what());
  }
}

}  // namespace

namespace detail {

std::shared_ptr<ClassDef> registerClassDef(Runtime& rt, const std::string& name,
                                           ClassOptions options) {
  auto def = std::make_shared<ClassDef>();
  def->name = name;
  def->options = options;
  // The constructor is the function `name`: remote(to, name, args) keeps the
  // object it returns in an owner RRef.
  rt.registerFunction(name, [def](const CallInfo& info, std::vector<c10::IValue> args) {
    const std::string& self = info.runtime.self().name;
    if (!def->construct) {
      throw RpcError(ErrorCode::kInvalidArgument, self,
                     "class '" + def->name + "' has no constructor registered");
    }
    return runUserCode(self, "constructing '" + def->name + "'", [&] {
      std::shared_ptr<void> object = def->construct(info, std::move(args));
      if (!object) throw std::runtime_error("the constructor returned null");
      return c10::IValue::make_capsule(c10::make_intrusive<objects::ObjectHolder>(def, object));
    });
  });
  return def;
}

c10::IValue localRRefs(Runtime& rt, const c10::IValue& values) {
  c10::impl::GenericList out(c10::AnyType::get());
  for (const auto& v : values.toListRef()) out.push_back(rt.makeRRef(v).toIValue());
  return out;
}

}  // namespace detail

namespace objects {

c10::IValue invokeMethod(const c10::IValue& value, const std::string& method, const CallInfo& info,
                         std::vector<c10::IValue> args) {
  const std::string& self = info.runtime.self().name;
  ObjectHolder* holder =
      value.isCapsule() ? dynamic_cast<ObjectHolder*>(value.toCapsule().get()) : nullptr;
  if (holder == nullptr) {
    throw RpcError(ErrorCode::kInvalidArgument, self,
                   std::string("method '") + method + "' called on an RRef to a " +
                       value.tagKind() + ", not to a remote object");
  }
  auto it = holder->cls->methods.find(method);
  if (it == holder->cls->methods.end()) {
    throw RpcError(ErrorCode::kInvalidArgument, self,
                   "class '" + holder->cls->name + "' has no method '" + method + "'");
  }
  return runUserCode(self, holder->cls->name + "." + method, [&] {
    if (!holder->cls->options.serializeCalls) {
      return it->second(holder->object.get(), info, std::move(args));
    }
    std::lock_guard<std::mutex> lock(holder->mu);
    return it->second(holder->object.get(), info, std::move(args));
  });
}

namespace {

// Calls `method` once `value` (an owner entry's) is done, as a call from
// `caller`: at once when it is, else on the pool when it completes.
Future callWhenReady(Runtime& runtime, const WorkerInfo& caller, const Future& value,
                     std::string method, std::vector<c10::IValue> args) {
  auto invoke = [&runtime, &caller, method = std::move(method),
                 args = std::move(args)](const Future& ready) {
    CallInfo info{caller, method, runtime};
    return invokeMethod(ready.value(), method, info, args);
  };
  if (!value.isDone()) return value.then(invoke);
  try {
    return Future::fromValue(invoke(value));
  } catch (...) {
    return Future::fromError(std::current_exception());
  }
}

}  // namespace

void registerBuiltins(RuntimeImpl& rt) {
  // args: (rref worker, rref local, method, args...). On the pool: methods may
  // block, and the object may still be under construction.
  rt.registerFunction(
      kBuiltinMethod, nullptr,
      [&rt](const CallInfo& info, std::vector<c10::IValue> args) {
        if (args.size() < 3 || !args[0].isInt() || !args[1].isInt() || !args[2].isString()) {
          throw RpcError(ErrorCode::kInvalidArgument, rt.self().name,
                         "a malformed method call (expected rref worker, local id, method)");
        }
        GloballyUniqueId id{static_cast<int32_t>(args[0].toInt()),
                            static_cast<uint64_t>(args[1].toInt())};
        auto entry = rt.rrefs().findOrAwaitOwner(id);
        if (!entry) {
          throw RpcError(ErrorCode::kInvalidArgument, rt.self().name,
                         "no RRef " + idString(id) + " on worker '" + rt.self().name + "'");
        }
        std::string method = args[2].toStringRef();
        args.erase(args.begin(), args.begin() + 3);
        return callWhenReady(info.runtime, info.caller, Future(entry->value), std::move(method),
                             std::move(args));
      },
      FunctionOptions{});
}

Future callOwned(RuntimeImpl& rt, const std::shared_ptr<OwnerEntry>& entry,
                 const std::string& method, std::vector<c10::IValue> args) {
  // As a call would: on the pool, never on the caller's thread.
  Future value(entry->value);
  auto ready = detail::newFutureState(rt.pool());
  value.addInlineCallback([ready](const Future&) { ready->complete(c10::IValue()); });
  return Future(ready).then(
      [&runtime = rt.owner(), &caller = rt.self(), value, method, args](const Future&) {
        CallInfo info{caller, method, runtime};
        return invokeMethod(value.value(), method, info, args);
      });
}

}  // namespace objects
}  // namespace rpcjob::runtime
