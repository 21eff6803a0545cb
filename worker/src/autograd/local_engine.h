#pragma once
// A worker's part of a distributed backward pass, run on the calling thread.
//
// The pass Container::propagate needs is libtorch's
//   Engine::execute(roots, grads, keep_graph=true, create_graph=false,
//                   accumulate_grad=false, outputs)
// and libtorch's engine hands every CUDA node to its device thread while the
// caller sleeps: two cross-thread wake-ups per pass (25-55 us each on a
// 16-vCPU GPU host), for a graph of a few nodes. runLocalBackward runs the same
// pass on the calling thread:
// - only the part of the graph leading from the roots to some output runs (the
//   engine's exec_info); dependencies are counted over it, a node runs once
//   all its inputs arrived (summed, as the engine's InputBuffer does), in the
//   engine's order (highest sequence number first);
// - an output edge captures the gradient reaching it (undefined if none) and
//   its node runs only if another output lies beyond it (as in the engine);
// - grad mode off while nodes run; nothing is released (the graph is kept);
//   each node's outputs are validated as the engine's validate_outputs does;
// - streams: a node runs on its forward's stream; a gradient crossing streams
//   is ordered by an event (the engine's InputBuffer::add rules), never by the
//   host; at the end the caller's current streams wait for the streams that
//   produced the captured gradients (the engine's leaf streams).
// What it cannot do faithfully goes, whole pass and decided before any node
// runs, to libtorch's engine: nodes with hooks, anomaly mode, nodes on devices
// other than CPU and CUDA, and a node that runs with an input no output needs
// (the engine tells it, through its current graph task, to skip that
// gradient). See worker/README.md, "Distributed autograd".
//
// Thread safety: a pass keeps its state to itself; passes on several threads
// may share nodes (a node reached by two gradient messages), which then run
// concurrently, as CPU nodes do under libtorch's engine (its nodes lock
// themselves while they run).

#include <torch/csrc/autograd/edge.h>

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace rpcjob::runtime::autograd {

// The semantics above. `libtorchReason`, when given, says why the pass went
// to libtorch's engine (empty: it ran here). A node that throws fails the call
// with its exception, naming the node.
std::vector<at::Tensor> runLocalBackward(const std::vector<torch::autograd::Edge>& roots,
                                         std::vector<at::Tensor> grads,
                                         const std::vector<torch::autograd::Edge>& outputs,
                                         std::string* libtorchReason = nullptr);

// The same call on libtorch's engine.
std::vector<at::Tensor> runLibtorchBackward(const std::vector<torch::autograd::Edge>& roots,
                                            std::vector<at::Tensor> grads,
                                            const std::vector<torch::autograd::Edge>& outputs);

// RPCJOB_AUTOGRAD_ENGINE: "thread" (default: runLocalBackward) or "libtorch"
// (every pass on libtorch's engine, for A/B runs).
enum class AutogradEngine { kThread, kLibtorch };
// Unset or empty: kThread; anything else than the two names throws
// std::invalid_argument naming the variable.
AutogradEngine parseAutogradEngine(const char* value);
// The environment's choice, read once per process.
AutogradEngine autogradEngine();

}  // namespace rpcjob::runtime::autograd
