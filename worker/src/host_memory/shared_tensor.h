#pragma once
// CPU tensors whose storage is a region of the process's arena
// (shared_arena.h): the public emptySharedHost() and the runtime's receive
// buffers for large tensors.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace rpcjob::runtime::host_memory {

// An uninitialised contiguous tensor in the arena; undefined when the arena
// could not map memory (the caller falls back to at::empty).
at::Tensor arenaTensor(at::IntArrayRef sizes, c10::ScalarType dtype);

}  // namespace rpcjob::runtime::host_memory
