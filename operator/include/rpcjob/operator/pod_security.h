#pragma once
// Worker pods' securityContext, and which channels a namespace's Pod Security
// level leaves out. Pure: no I/O. Why each channel needs what: operator/README.md
// ("Pod security").
//
// Defaults, set field by field where the template is silent (a field the template
// sets wins, even one that breaks `restricted`: the template is the user's word):
//   pod:       runAsNonRoot true, runAsUser/runAsGroup/fsGroup 65532 (the user of
//              docker/worker*.Dockerfile; fsGroup makes mounted Secrets and
//              ConfigMaps readable), seccompProfile RuntimeDefault;
//   container: allowPrivilegeEscalation false, capabilities drop [ALL] (when the
//              template names no capabilities at all).
// Then the capabilities the plan's channels ask for (planner: SYS_PTRACE for
// cma/rpcjob_cma inside a pod, IPC_LOCK for ibv/cuda_gdr) are added to the
// worker container, those the namespace's level allows only: baseline and
// restricted allow neither (restricted allows adding only NET_BIND_SERVICE).
//
// Levels come from the namespace label pod-security.kubernetes.io/enforce:
// absent or empty -> privileged; "baseline", "restricted"; any other value ->
// restricted (the admission plugin treats a value it cannot read as the most
// restrictive level too).

#include <string>
#include <vector>

namespace rpcjob::op {

inline constexpr const char* kPodSecurityEnforceLabel = "pod-security.kubernetes.io/enforce";
inline constexpr int kWorkerUserId = 65532;

enum class PodSecurityLevel { Privileged, Baseline, Restricted };
PodSecurityLevel podSecurityLevel(const std::string& enforceLabel);
const char* toString(PodSecurityLevel level);

// Whether `level` lets a container add capability `cap` (without "CAP_").
bool capabilityAllowed(PodSecurityLevel level, const std::string& cap);

// A transport or channel the namespace's level rules out, and why.
struct LeftOut {
  std::string name;        // ibv, cuda_gdr
  std::string capability;  // what it needs that the level forbids (IPC_LOCK)
};
// The transports and channels of a job that `level` leaves out: those whose
// only way to work needs a capability the level forbids. cma and rpcjob_cma are
// never left out: the kernel lets a process read another of the same uid and
// capabilities without CAP_SYS_PTRACE (Yama scope 0/1), so they work under
// restricted wherever the runtime's seccomp profile allows process_vm_readv;
// where it does not, the workers find cma not viable and fall back to basic.
std::vector<LeftOut> leftOutBy(PodSecurityLevel level);

// `names` (a job's allowed transports or channels; empty: all of `known`) minus
// those in `out`, in their order. Empty in -> the filtered `known` when anything
// was removed, else empty (all viable, as before).
std::vector<std::string> withoutLeftOut(const std::vector<std::string>& names,
                                        const std::vector<std::string>& known,
                                        const std::vector<LeftOut>& out);

struct PodSecurityInput {
  std::string podSecurityContext;         // the template's spec.securityContext JSON ("": none)
  std::string containerSecurityContext;   // the worker container's securityContext JSON ("": none)
  std::vector<std::string> capabilities;  // the plan's pod capabilities
  PodSecurityLevel level = PodSecurityLevel::Privileged;
};
struct PodSecurityResult {
  std::string podSecurityContext;        // JSON object
  std::string containerSecurityContext;  // JSON object
  std::vector<std::string> omitted;      // plan capabilities the level forbids, not added
};
PodSecurityResult podSecurity(const PodSecurityInput& in);

}  // namespace rpcjob::op
