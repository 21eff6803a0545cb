#pragma once
// How a Runtime is set up. Defaults suit a CPU worker; fromAssignment() fills the
// transports, channels and device maps from the worker table.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/assignment/assignment.h"
#include "rpcjob/runtime/observer.h"
#include "rpcjob/runtime/tensorpipe_hooks.h"

namespace rpcjob::runtime {

inline constexpr std::chrono::milliseconds kDefaultRpcTimeout{60000};  // as PyTorch

// How start() brings a job up. Every worker of a job must use the same mode
// (the environment variables below give all of them the same one).
enum class StartPipes {
  // kFullMesh for jobs of at most fullMeshMaxWorkers workers, else kLeaderBarrier.
  kAuto,
  // A pipe to every worker (ourselves included), all opened at once, each
  // handshake awaited: first calls find warm pipes. Pipes, file descriptors and
  // memory grow with the square of the workers (about 21 descriptors and 6 MB
  // per pipe with shm, two pipes per pair of workers on each of them).
  kFullMesh,
  // Every worker joins at rank 0, which answers once all have joined: start()
  // returns when every worker listens. Pipes open on first use (the first call
  // to a peer pays its handshake, a few ms). Linear in the workers.
  kLeaderBarrier,
  // Nothing beyond listening: pipes open on first use, and the first call to a
  // worker that has not started yet fails (kConnection).
  kLazy,
};
// "auto", "full-mesh", "leader", "lazy" (RPCJOB_START_PIPES).
const char* toString(StartPipes mode);

inline constexpr int kDefaultFullMeshMaxWorkers = 16;

struct RuntimeOptions {
  // Allowed transports and channels, highest priority first. Empty: every one
  // that is viable here, in the default order ("shm", "ibv", "uv") and
  // ("cma", "mpt", "xth", "basic"). Unknown names are an error at start().
  std::vector<std::string> transports;
  std::vector<std::string> channels;
  // Lanes (uv contexts) of the mpt channel.
  int mptLanes = 2;

  // Used when a call gives none; zero means no timeout.
  std::chrono::milliseconds defaultTimeout = kDefaultRpcTimeout;

  // What start() waits for before it returns (StartPipes), and for how long at
  // most: a worker that has not started by then fails start() on every worker,
  // naming it. (StartPipes replaced `bool eagerPipes`: true is kAuto, or
  // kFullMesh to keep a full mesh at any size; false is kLazy.)
  StartPipes startPipes = StartPipes::kAuto;
  // kAuto's limit: a full mesh for jobs of at most this many workers, the
  // leader barrier above (RPCJOB_FULL_MESH_MAX_WORKERS).
  int fullMeshMaxWorkers = kDefaultFullMeshMaxWorkers;
  std::chrono::milliseconds startTimeout{60000};

  // Threads that run functions registered with runInline = false and `then`
  // continuations (work that may block must not run on TensorPipe's threads).
  int poolThreads = 4;

  // Per peer name: local device -> that peer's device ("cpu", "cuda:N"). The
  // inverse map is used for responses. From the assignment's deviceMaps.
  std::map<std::string, DeviceMap> deviceMaps;

  std::shared_ptr<Observer> observer;  // optional
  TensorpipeHooks hooks;               // optional

  // Host to listen on; empty: the host part of our address in the assignment.
  std::string listenHost;

  // The largest incoming message (payload and tensors together) a peer may
  // send; a larger one closes that pipe before anything is allocated for it
  // (its sender's pending calls fail). 0: this machine's memory, or this
  // process's cgroup limit where lower (a pod's memory limit), since a larger
  // message could not be received anyway. rpcjob-worker and
  // Runtime::fromEnvironment() read RPCJOB_MAX_MESSAGE_BYTES.
  std::uint64_t maxMessageBytes = 0;

  // The job's secret (at least 16 bytes). Set: a pipe carries calls only once
  // both of its sides proved that they hold it (worker/src/auth/), and a peer
  // that does not is closed and counted (Observer::handshakeFailed). Empty:
  // pipes are not authenticated and start() warns. Never logged or exported.
  // Runtime::fromEnvironment() reads it from the file RPCJOB_SECRET_FILE names.
  std::string secret;
  // How long an accepted or dialled pipe may take to authenticate before it is
  // closed (RPCJOB_HANDSHAKE_TIMEOUT_MS).
  std::chrono::milliseconds handshakeTimeout{30000};

  // Small messages to a worker on this host (same boot id and pid namespace)
  // bypass TensorPipe through a shared-memory lane that a thread of the
  // receiving process polls (worker/README.md, "The shared-memory lane").
  // Everything else, and pipes to peers without it, go as before.
  // RPCJOB_LANE=0|1.
  bool sharedMemoryLane = true;

  // start() calls useSharedHostAllocator() (shared_host.h): CPU tensors of 4 MiB
  // and more that this process makes travel to workers on its host at memory
  // speed. Process-wide and never undone. RPCJOB_SHARED_HOST_ALLOCATOR=0|1.
  bool sharedHostAllocator = false;
};

// RuntimeOptions settings from the environment, applied to `options`:
// RPCJOB_MAX_MESSAGE_BYTES (a positive number of bytes), RPCJOB_SECRET_FILE (a
// file holding the job secret), RPCJOB_HANDSHAKE_TIMEOUT_MS (milliseconds),
// RPCJOB_START_PIPES (auto, full-mesh, leader, lazy), RPCJOB_FULL_MESH_MAX_WORKERS
// (a positive number), RPCJOB_START_TIMEOUT_MS (milliseconds), RPCJOB_LANE (0 or 1),
// RPCJOB_SHARED_HOST_ALLOCATOR (0 or 1).
// Throws std::invalid_argument for a value that is not one, or a secret file
// that cannot be read or is too short (never echoing its content).
void applyEnvironment(RuntimeOptions& options);

// Transports, channels and device maps of `worker` from the assignment; the rest
// default.
RuntimeOptions optionsFromAssignment(const Assignment& assignment, const std::string& worker);

struct CallOptions {
  // Zero: RuntimeOptions::defaultTimeout. Negative: no timeout.
  std::chrono::milliseconds timeout{0};
};

struct FunctionOptions {
  // true: run on the TensorPipe thread that read the request (no thread hand-off:
  // the fast path). Only for functions that neither block nor wait on futures;
  // anything else deadlocks the pipe it was read from. false: the runtime's pool.
  bool runInline = false;
};

}  // namespace rpcjob::runtime
