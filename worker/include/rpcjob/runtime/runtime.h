#pragma once
// The RPC runtime: a named worker among the workers of an assignment, calling
// functions registered by name on its peers (torch.distributed.rpc in C++).
//
//   auto rt = rpcjob::runtime::Runtime::fromEnvironment();
//   rt->registerFunction("add", [](const CallInfo&, std::vector<c10::IValue> args) {
//     return c10::IValue(args[0].toTensor() + args[1].toTensor());
//   });
//   rt->start();
//   c10::IValue sum = rt->rpcSync("worker1", "add", {a, b});
//   rt->shutdown();
//
// Thread safety: after start(), every method may be called from any thread.
// registerFunction only before start(), so the request path reads the table
// without locking.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/assignment/assignment.h"
#include "rpcjob/runtime/errors.h"
#include "rpcjob/runtime/future.h"
#include "rpcjob/runtime/ivalue_fwd.h"
#include "rpcjob/runtime/options.h"
#include "rpcjob/runtime/rref.h"

namespace rpcjob::runtime {

class RuntimeImpl;

struct WorkerInfo {
  std::string name;
  int rank = -1;
};

// What a registered function learns about the call it serves.
struct CallInfo {
  const WorkerInfo& caller;
  const std::string& function;
  class Runtime& runtime;  // for nested calls and makeRRef
};

using Function = std::function<c10::IValue(const CallInfo&, std::vector<c10::IValue> args)>;
// Returns a future instead of a value: for functions that call other workers
// without blocking a thread while they wait.
using AsyncFunction = std::function<Future(const CallInfo&, std::vector<c10::IValue> args)>;

// Per peer and device pair, the channel TensorPipe uses (see channelChoices()).
struct ChannelChoice {
  std::string peer;
  std::string localDevice;   // "cpu:0"
  std::string remoteDevice;  // "cpu:0"
  std::string channel;       // "cma", "mpt", ...
  std::string transport;     // the highest-priority transport both sides share
};

enum class ShutdownMode { kGraceful, kImmediate };

class Runtime {
 public:
  Runtime(Assignment assignment, const std::string& name, RuntimeOptions options);
  // Identity from RPCJOB_ASSIGNMENT / RPCJOB_PEERS etc. (rpcjob/assignment/environment.h),
  // options from the assignment.
  static std::unique_ptr<Runtime> fromEnvironment();
  ~Runtime();  // immediate shutdown if still running
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Initialization
  void registerFunction(const std::string& name, Function fn, FunctionOptions options = {});
  // Runs on the runtime's pool like any function (it may block), unless
  // options.runInline: then on the thread that read the request, and it must
  // only start work and return its future.
  void registerAsyncFunction(const std::string& name, AsyncFunction fn,
                             FunctionOptions options = {});
  // Classes: registerClass() in rpcjob/runtime/remote_object.h.
  // Listens, then waits as RuntimeOptions::startPipes says (a full mesh of
  // pipes, or every worker joining at rank 0): once it returns, every worker
  // listens. Throws RpcError naming a worker that has not started within
  // startTimeout, or when the file descriptors the start-up needs cannot fit.
  void start();

  // Identity
  const WorkerInfo& self() const;
  const WorkerInfo& worker(const std::string& name) const;  // throws kInvalidArgument
  const WorkerInfo& worker(int rank) const;
  const std::vector<WorkerInfo>& workers() const;

  // Calls. rpcSync returns once the answer arrived; CUDA tensors in it are
  // ready for work enqueued on the current streams (the host does not wait for
  // their copies: Future::valueOnStreams, as PyTorch's rpc_sync). Read them on
  // another stream only after synchronising with the current one.
  Future rpcAsync(const std::string& to, const std::string& function, std::vector<c10::IValue> args,
                  CallOptions options = {});
  c10::IValue rpcSync(const std::string& to, const std::string& function,
                      std::vector<c10::IValue> args, CallOptions options = {});
  // `function` may name a registered class: constructs an object (remote_object.h).
  RRef remote(const std::string& to, const std::string& function, std::vector<c10::IValue> args,
              CallOptions options = {});
  // An RRef to `value` owned by this worker (Python's RRef(x)).
  RRef makeRRef(c10::IValue value);
  // RRef::fromIValue(); also takes the wire form of a fork (kept for callers
  // from before RRefs were converted automatically).
  RRef rrefFromIValue(const c10::IValue& value);

  // Channels TensorPipe selected with each peer we have a pipe to (reproduced
  // from the handshake's device descriptors with TensorPipe's rule).
  std::vector<ChannelChoice> channelChoices() const;

  // Graceful: waits until no worker has outstanding calls (all workers must call
  // it; bounded by `deadline`; a dead peer counts as done) and every tensor this
  // worker sent has reached its peer, then closes.
  // Immediate: fails pending calls with kShutdown and closes now. Either way, an
  // async function's result that completes later is dropped.
  void shutdown(ShutdownMode mode = ShutdownMode::kGraceful,
                std::chrono::milliseconds deadline = std::chrono::milliseconds(60000));

  RuntimeImpl& impl() { return *impl_; }

 private:
  std::shared_ptr<RuntimeImpl> impl_;
};

// Names of built-in functions every runtime serves.
inline constexpr const char* kBuiltinPing = "rpcjob.ping";                   // () -> None
inline constexpr const char* kBuiltinEcho = "rpcjob.echo";                   // (x...) -> x (inline)
inline constexpr const char* kBuiltinOwnerRRefCount = "rpcjob.owner_rrefs";  // () -> int
inline constexpr const char* kBuiltinShutdownJoin = "rpcjob.shutdown_join";

}  // namespace rpcjob::runtime
