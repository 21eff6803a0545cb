#include <algorithm>

#include "detail/links.h"

namespace rpcjob::planner::detail {
namespace {

// The candidates the spec allows, in the spec's order when it gives one.
std::vector<std::string> allowed(const std::vector<std::string>& candidates,
                                 const std::vector<std::string>& spec) {
  if (spec.empty()) return candidates;
  std::vector<std::string> out;
  for (const auto& name : spec) {
    if (std::find(candidates.begin(), candidates.end(), name) != candidates.end()) {
      out.push_back(name);
    }
  }
  return out;
}

}  // namespace

bool Link::uses(const std::string& name) const {
  return std::find(transports.begin(), transports.end(), name) != transports.end() ||
         std::find(channels.begin(), channels.end(), name) != channels.end();
}

Link linkBetween(bool samePod, bool bothRdma, bool bothGpus, const api::RpcJobSpec& spec) {
  std::vector<std::string> transports;
  std::vector<std::string> cpu;
  std::vector<std::string> cuda;
  if (samePod) {
    transports = {"shm", "uv"};
    cpu = {"rpcjob_cma", "cma", "basic"};
    cuda = {"cuda_nvlink", "cuda_ipc", "cuda_basic"};
  } else {
    transports = bothRdma ? std::vector<std::string>{"ibv", "uv"} : std::vector<std::string>{"uv"};
    cpu = {"mpt", "basic"};
    cuda = bothRdma ? std::vector<std::string>{"cuda_gdr", "cuda_basic"}
                    : std::vector<std::string>{"cuda_basic"};
  }
  Link link;
  link.transports = allowed(transports, spec.transports);
  const auto cpuAllowed = allowed(cpu, spec.channels);
  const auto cudaAllowed = bothGpus ? allowed(cuda, spec.channels) : std::vector<std::string>{};
  link.hasCpuChannel = !cpuAllowed.empty();
  link.hasCudaChannel = !cudaAllowed.empty();
  // One list in priority order: the spec's order when it names channels, else CUDA
  // first (the pair's fast path when it has GPUs), then CPU.
  std::vector<std::string> all = cudaAllowed;
  all.insert(all.end(), cpuAllowed.begin(), cpuAllowed.end());
  link.channels = spec.channels.empty() ? all : allowed(all, spec.channels);
  return link;
}

}  // namespace rpcjob::planner::detail
