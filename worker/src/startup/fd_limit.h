#pragma once
// This process's file-descriptor limit (RLIMIT_NOFILE) and use (I/O; the
// decisions on them are in start_plan.h).

#include <cstdint>
#include <string>

#include "rpcjob/runtime/options.h"

namespace rpcjob::runtime::startup {

struct FdLimit {
  std::uint64_t soft = 0;
  std::uint64_t hard = 0;
};

// Raises the soft limit to the hard limit and returns both as they are then.
// A pipe costs about 21 descriptors and a worker holds one or two per peer it
// talks to, so the common default soft limit of 1024 (kept low for select()'s
// sake; the runtime never uses select) would be hit by a few dozen peers. Go's
// runtime does the same at start-up, as do many servers (nginx's
// worker_rlimit_nofile, systemd's advice for services).
FdLimit raiseFdLimit();

// The current limits, unchanged.
FdLimit fdLimit();

// Descriptors open in this process now (the entries of /proc/self/fd); 0 when
// that cannot be read.
std::uint64_t openFds();

// In start(), before anything listens: raiseFdLimit(), then throws RpcError
// (kInvalidArgument) when the pipes `resolved` opens at once on worker `rank`
// cannot fit (start_plan.h's fdLimitProblem).
void reserveFdsForStart(const std::string& worker, StartPipes resolved, int workers, int rank);

// "" when a new pipe to `peer` fits under the limit now, else why not
// (start_plan.h's pipeFdProblem).
std::string fdsForPipeProblem(const std::string& peer);

}  // namespace rpcjob::runtime::startup
