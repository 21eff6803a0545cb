#pragma once
// Opening a peer process's memfd (a shared-arena region, a lane) through
// /proc/<pid>/fd/<fd>: the kernel allows it under the same ptrace rules as
// process_vm_readv (PTRACE_MODE_READ). What we opened is checked, not what the
// path named a moment before: /proc/self/fd/<ours> must read
// "/memfd:<name> (deleted)", the file must be sealed against shrinking (only
// memfds take seals; and a sealed file never loses the pages a mapping reads,
// so no SIGBUS), and its size must cover the range the peer named.

#include <cstdint>
#include <string>

namespace rpcjob::runtime::host_memory {

// What a peer names: its pid, its descriptor number, the memfd's name and the
// bytes [offset, offset + length) wanted; `what` names it in errors ("region 3
// of pid 7 (fd 12)"), `kind` says what it should be ("region", "lane").
struct PeerMemfd {
  int64_t pid = 0;
  int64_t fd = -1;
  std::string name;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string what;
  std::string kind;
};

// Whether the file we opened is `file`: `link`, what /proc/self/fd/<ours>
// reads; `seals`, F_GET_SEALS (-1: failed, not a memfd); `fileSize`, fstat's.
// "" or why not. Pure.
std::string checkPeerMemfd(const PeerMemfd& file, const std::string& link, int seals,
                           uint64_t fileSize);

// Opens and checks `file` (open(2) `flags`: O_RDONLY, O_RDWR); the descriptor
// (close-on-exec) and the file's size in `size`, or -1 with `error` set.
int openPeerMemfd(const PeerMemfd& file, int flags, uint64_t& size, std::string& error);

}  // namespace rpcjob::runtime::host_memory
