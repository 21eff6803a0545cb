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

  // Open a pipe to every peer at start(), in parallel, and wait until all have
  // answered the handshake (bounded by startTimeout). false: on first call.
  bool eagerPipes = true;
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
};

// RuntimeOptions settings from the environment, applied to `options`:
// RPCJOB_MAX_MESSAGE_BYTES (a positive number of bytes), RPCJOB_SECRET_FILE (a
// file holding the job secret), RPCJOB_HANDSHAKE_TIMEOUT_MS (milliseconds).
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
