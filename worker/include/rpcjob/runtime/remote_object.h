#pragma once
// Remote objects: C++ classes registered by name, constructed on a worker by
// Runtime::remote() and called through the RRef it returns (PyTorch's
// rpc.remote(worker, MyModule, args) and rref.rpc_sync().forward(x)).
//
//   registerClass<Stage>(rt, "Stage", {/*serializeCalls=*/true})
//       .constructor([](std::vector<c10::IValue> args) {
//         return std::make_shared<Stage>(args.at(0).toInt());
//       })
//       .method("forward", [](Stage& s, std::vector<c10::IValue> args) {
//         return s.forward(args.at(0).toTensor());
//       });
//   rt.start();
//   RRef stage = rt.remote("worker1", "Stage", {int64_t{4}});
//   at::Tensor y = stage.rpcSync("forward", {x}).toTensor();
//
// Only registered classes and methods run: an unknown name, arguments a method
// rejects, or an exception in it is an RpcError on the caller. Register before
// start(), on every worker that may own such objects.
//
// A class deriving from torch::nn::Module also gets the built-in method
// "parameter_rrefs": a list of RRefs (owned where the module lives) to its
// parameters, for a distributed optimizer (the pipeline tutorial's
// parameter_rrefs()).
//
// Concurrency: methods of one object run on the runtime's pool, several at once
// when calls overlap, unless the class is registered with serializeCalls (then
// one at a time per object, in no guaranteed order).

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rpcjob/runtime/ivalue_fwd.h"
#include "rpcjob/runtime/runtime.h"

namespace torch::nn {
class Module;
}

namespace rpcjob::runtime {

// The function behind RRef proxies: args (rref worker, rref local, method, args...).
inline constexpr const char* kBuiltinMethod = "rpcjob.method";
// The method every registered torch::nn::Module class has.
inline constexpr const char* kParameterRRefsMethod = "parameter_rrefs";

struct ClassOptions {
  // One method call at a time per object (the tutorial's lock in forward).
  bool serializeCalls = false;
};

namespace detail {
// c10::IValue, spelled so that it depends on T: the header only declares
// IValue, and the code using it is compiled where the user's code includes it.
template <class V, class T>
struct Dependent {
  using type = V;
};
using ErasedConstructor =
    std::function<std::shared_ptr<void>(const CallInfo&, std::vector<c10::IValue>)>;
using ErasedMethod = std::function<c10::IValue(void*, const CallInfo&, std::vector<c10::IValue>)>;
struct ClassDef {
  std::string name;
  ClassOptions options;
  ErasedConstructor construct;
  std::map<std::string, ErasedMethod> methods;  // read-only after start()
};
// Registers the class's constructor as the function `name` (remote.cc).
std::shared_ptr<ClassDef> registerClassDef(Runtime& rt, const std::string& name,
                                           ClassOptions options);
// A list of RRefs owned here, one per element of the list `values`.
c10::IValue localRRefs(Runtime& rt, const c10::IValue& values);
}  // namespace detail

template <class T>
class ClassBuilder {
 public:
  explicit ClassBuilder(std::shared_ptr<detail::ClassDef> def) : def_(std::move(def)) {}

  // f(std::vector<c10::IValue> args) or f(const CallInfo&, args), returning
  // std::shared_ptr<T>.
  template <class F>
  ClassBuilder& constructor(F f) {
    using Value = typename detail::Dependent<c10::IValue, F>::type;
    def_->construct = [f = std::move(f)](const CallInfo& info,
                                         std::vector<Value> args) -> std::shared_ptr<void> {
      if constexpr (std::is_invocable_v<F&, const CallInfo&, std::vector<Value>>) {
        return std::shared_ptr<T>(f(info, std::move(args)));
      } else {
        return std::shared_ptr<T>(f(std::move(args)));
      }
    };
    return *this;
  }

  // f(T&, std::vector<c10::IValue> args) or f(T&, const CallInfo&, args),
  // returning anything c10::IValue is constructible from (or void: None).
  template <class F>
  ClassBuilder& method(const std::string& name, F f) {
    using Value = typename detail::Dependent<c10::IValue, F>::type;
    def_->methods[name] = [f = std::move(f)](void* self, const CallInfo& info,
                                             std::vector<Value> args) -> Value {
      T& object = *static_cast<T*>(self);
      if constexpr (std::is_invocable_v<F&, T&, const CallInfo&, std::vector<Value>>) {
        if constexpr (std::is_void_v<decltype(f(object, info, std::move(args)))>) {
          f(object, info, std::move(args));
          return {};
        } else {
          return Value(f(object, info, std::move(args)));
        }
      } else {
        if constexpr (std::is_void_v<decltype(f(object, std::move(args)))>) {
          f(object, std::move(args));
          return {};
        } else {
          return Value(f(object, std::move(args)));
        }
      }
    };
    return *this;
  }

 private:
  std::shared_ptr<detail::ClassDef> def_;
};

// Registers class T as `name` (before rt.start()); add its constructor and
// methods on the builder returned.
template <class T>
ClassBuilder<T> registerClass(Runtime& rt, const std::string& name, ClassOptions options = {}) {
  ClassBuilder<T> builder(detail::registerClassDef(rt, name, options));
  if constexpr (std::is_base_of_v<torch::nn::Module, T>) {
    using Value = typename detail::Dependent<c10::IValue, T>::type;
    builder.method(kParameterRRefsMethod, [](T& module, const CallInfo& info, std::vector<Value>) {
      return detail::localRRefs(info.runtime, Value(module.parameters()));
    });
  }
  return builder;
}

}  // namespace rpcjob::runtime
