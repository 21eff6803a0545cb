#pragma once
// What the tests of hostile and unauthenticated peers share: a worker w1 (a
// Cluster of one) whose stderr goes to a file, so that a case can check what it
// logged, and a bare TensorPipe context that speaks to it without rpcjob's runtime.

#include <fcntl.h>
#include <unistd.h>

#include <tensorpipe/tensorpipe.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cluster.h"

namespace rpcjob::testing {

// Starts a Cluster of one whose worker is forked with `env` set and fd 2 on
// `logFd` (taken: closed here). This process keeps its own stderr, and `env`'s
// variables are unset again, when it returns or throws.
inline std::unique_ptr<Cluster> clusterLoggingTo(
    int logFd, const std::vector<std::pair<std::string, std::string>>& env,
    runtime::RuntimeOptions options = {}) {
  const int ours = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (ours < 0) {
    close(logFd);
    throw std::runtime_error(std::string("dup of stderr: ") + std::strerror(errno));
  }
  dup2(logFd, STDERR_FILENO);
  close(logFd);
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  auto restore = [&] {
    for (const auto& entry : env) unsetenv(entry.first.c_str());
    dup2(ours, STDERR_FILENO);
    close(ours);
  };
  std::unique_ptr<Cluster> cluster;
  try {
    cluster = std::make_unique<Cluster>(1, std::move(options));
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return cluster;
}

// A peer that knows the protocol: the plainest transport and channel, both of
// which every worker offers, under the pipe name `name`.
inline std::shared_ptr<tensorpipe::Context> rawPeerContext(const std::string& name = "hostile") {
  auto context = std::make_shared<tensorpipe::Context>(tensorpipe::ContextOptions().name(name));
  context->registerTransport(0, "uv", tensorpipe::transport::uv::create());
  context->registerChannel(0, "basic", tensorpipe::channel::basic::create());
  return context;
}

}  // namespace rpcjob::testing
