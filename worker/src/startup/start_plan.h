#pragma once
// What start() will do, decided before it does it (pure, no I/O): the start
// mode for a job's size, how many pipes that mode opens at once on a worker,
// the file descriptors they need, and the error when they cannot fit.
//
// The per-pipe figures were measured with `rpcjob run` of `rpcjob-worker serve`
// jobs of 2, 8 and 32 workers in a full mesh on the 2-core development machine
// (shm and uv transports, the default channels; 2026-11-24, see
// benchmarks/results/2026-11-24-startup-64-2core.md): a worker held 119, 371
// and 1379 descriptors for 4, 16 and 64 pipes, i.e. 21 per pipe (sockets,
// eventfds and memfd ring segments of shm, the rpcjob_cma channel's own
// connection) on a base of 35. The estimate rounds both up, so that a start-up
// it lets through fits.

#include <cstdint>
#include <optional>
#include <string>

#include "rpcjob/runtime/options.h"

namespace rpcjob::runtime::startup {

// RuntimeOptions from the environment (applyEnvironment in options.cc).
inline constexpr const char* kEnvStartPipes = "RPCJOB_START_PIPES";
inline constexpr const char* kEnvFullMeshMaxWorkers = "RPCJOB_FULL_MESH_MAX_WORKERS";
inline constexpr const char* kEnvStartTimeoutMs = "RPCJOB_START_TIMEOUT_MS";

inline constexpr std::uint64_t kFdsPerPipe = 24;  // 21 measured
inline constexpr std::uint64_t kFdsBase = 64;     // 35 measured: libtorch, listeners, logs

// RPCJOB_START_PIPES's values: toString(StartPipes); nullopt for anything else.
std::optional<StartPipes> parseStartPipes(const std::string& text);

// kAuto resolved for a job of `workers`: kFullMesh up to `fullMeshMaxWorkers`,
// else kLeaderBarrier. Other modes are kept.
StartPipes resolve(StartPipes requested, int workers, int fullMeshMaxWorkers);

// The pipes a resolved mode has open on worker `rank` when start() returns:
// the full mesh a client and a server pipe per worker (itself included); the
// leader barrier one server pipe per other worker on the leader, one client
// pipe elsewhere; lazy none.
std::uint64_t pipesAtStart(StartPipes resolved, int workers, int rank);

// Descriptors a process needs to hold `pipes` pipes.
std::uint64_t fdsNeeded(std::uint64_t pipes);

// "" when `need` descriptors fit under the soft limit `soft` (already raised
// to the hard limit where it could be); else the error start() throws, naming
// the limit, the need and the fix.
std::string fdLimitProblem(const std::string& worker, StartPipes resolved, int workers,
                           std::uint64_t pipes, std::uint64_t need, std::uint64_t soft,
                           std::uint64_t hard);

// "" when one more pipe fits with `open` descriptors in use under `soft`; else
// why a pipe to `peer` is not opened (its call fails with that, rather than
// TensorPipe aborting the process when a descriptor it passes cannot arrive).
std::string pipeFdProblem(const std::string& peer, std::uint64_t open, std::uint64_t soft);

}  // namespace rpcjob::runtime::startup
