// runLocalBackward: libtorch's engine's graph task (exec_info, dependencies,
// ready queue, leaf streams) on the calling thread; what happens to each
// gradient between two nodes is gradient_flow.h. Only public libtorch API that
// is the same in 1.13 and 2.x (GraphTask is not exported by 1.13). See
// local_engine.h.
#include "autograd/local_engine.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/version.h>

#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "autograd/gradient_flow.h"

namespace rpcjob::runtime::autograd {
namespace {

namespace ta = torch::autograd;
using Stream = OptionalStream;

bool hasHooks(ta::Node& node) {
  if (!node.pre_hooks().empty() || !node.post_hooks().empty()) return true;
#if TORCH_VERSION_MAJOR >= 2
  // 2.x keeps tensor hooks and retain_grad apart from the node's own hooks
  // (AccumulateGrad's tensor_pre_hooks are its leaf's hooks).
  if (!node.tensor_pre_hooks().empty() || !node.retains_grad_hooks().empty()) return true;
#endif
  return false;
}

// One node of the pass (the engine's dependencies_, exec_info_ and not_ready_
// entries together).
struct Task {
  ta::Node* node = nullptr;
  int dependencies = 0;
  bool needed = false;                                // runs: some output lies beyond it
  std::vector<std::pair<uint32_t, size_t>> captures;  // (input, index in outputs)
  bool buffered = false;
  std::vector<at::Tensor> buffer;
  Stream stream;
  bool executes() const { return needed || !captures.empty(); }
};

class Pass {
 public:
  // Builds the task: nodes reachable from the roots (not past any node older
  // than every output, which cannot lead to one), their dependency counts,
  // what runs and what is captured.
  Pass(const ta::edge_list& roots, const ta::edge_list& outputs) : roots_(roots) {
    // Node::topological_nr() writes the node (it marks it as having a parent):
    // passes that share nodes (a gradient message on each of two threads) must
    // not build at once. Only the build: the nodes then run without it.
    static std::mutex buildMu;
    std::lock_guard<std::mutex> build(buildMu);
    uint64_t minTopo = std::numeric_limits<uint64_t>::max();
    for (const auto& e : outputs) {
      if (e.function) minTopo = std::min<uint64_t>(minTopo, e.function->topological_nr());
    }
    countDependencies(minTopo);
    for (size_t k = 0; k < outputs.size(); ++k) {
      const auto& e = outputs[k];
      if (!e.function) continue;
      auto it = index_.find(e.function.get());
      if (it != index_.end()) tasks_[it->second].captures.emplace_back(e.input_nr, k);
    }
    markNeeded(minTopo);
  }

  // Why this pass cannot run here ("" when it can); fills in the streams.
  std::string unsupported() {
    for (Task& t : tasks_) {
      if (!t.executes()) continue;
      if (hasHooks(*t.node)) return "Function " + t.node->name() + " has hooks";
      for (uint32_t i = 0; i < t.node->num_inputs(); ++i) {
        const c10::DeviceType type = t.node->input_metadata(i).device().type();
        if (type != c10::DeviceType::CPU && type != kStreamDevice) {
          return "Function " + t.node->name() + " has an input on " + c10::DeviceTypeName(type);
        }
      }
      if (t.needed) {
        // The engine lets a running node skip the gradient of an input no
        // output needs (task_should_compute_output, through its current graph
        // task, which is not ours to set): here it would compute it, and a
        // formula libtorch leaves unimplemented would fail.
        const auto& edges = t.node->next_edges();
        for (size_t i = 0; i < edges.size(); ++i) {
          if (edges[i].function && !tasks_[index_.at(edges[i].function.get())].executes()) {
            return "Function " + t.node->name() + " has an input no output needs (" +
                   std::to_string(i) + ")";
          }
        }
      }
      t.stream = nodeStream(*t.node);
    }
    return {};
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& grads, size_t outputs) {
    captured_.assign(outputs, at::Tensor());
    // The roots' gradients come from the caller's current streams. They stay
    // referenced here, so no node's buffer ever adds into them in place.
    for (size_t i = 0; i < roots_.size(); ++i) {
      at::Tensor g = grads[i];
      Stream from;
      if (g.defined() && g.device().type() == kStreamDevice) {
        from = c10::impl::VirtualGuardImpl(kStreamDevice).getStream(g.device());
      }
      deliver(roots_[i], std::move(g), from);
    }
    while (!ready_.empty()) {
      Task& t = tasks_[ready_.top().second];
      ready_.pop();
      evaluate(t);
    }
    syncCallerStreams();
    return std::move(captured_);
  }

 private:
  size_t taskOf(ta::Node* node) {
    auto [it, added] = index_.emplace(node, tasks_.size());
    if (added) {
      tasks_.emplace_back();
      tasks_.back().node = node;
    }
    return it->second;
  }

  void countDependencies(uint64_t minTopo) {
    std::vector<size_t> stack;
    auto visitEdges = [&](const ta::edge_list& edges) {
      for (const auto& e : edges) {
        if (!e.function) continue;
        size_t before = tasks_.size();
        size_t i = taskOf(e.function.get());
        ++tasks_[i].dependencies;
        if (i == before) stack.push_back(i);
      }
    };
    visitEdges(roots_);
    while (!stack.empty()) {
      ta::Node* node = tasks_[stack.back()].node;
      stack.pop_back();
      if (node->topological_nr() < minTopo) continue;
      visitEdges(node->next_edges());
    }
  }

  // The engine's init_to_execute: a node is needed when one of its children
  // runs or captures; depth first, each node once.
  void markNeeded(uint64_t minTopo) {
    std::vector<uint8_t> done(tasks_.size(), 0);   // 0 new, 1 on the stack, 2 done
    std::vector<std::pair<size_t, size_t>> stack;  // (task, next edge to look at)
    auto descend = [&](size_t parent, bool hasParent, const ta::edge_list& edges, size_t& pos) {
      while (pos < edges.size()) {
        ta::Node* child = edges[pos++].function.get();
        if (child == nullptr) continue;
        size_t c = index_.at(child);
        if (done[c] == 2) {
          if (hasParent && tasks_[c].executes()) tasks_[parent].needed = true;
          continue;
        }
        done[c] = 1;
        stack.emplace_back(c, 0);
        return;
      }
    };
    size_t rootPos = 0;
    for (;;) {
      if (stack.empty()) {
        descend(0, false, roots_, rootPos);
        if (stack.empty()) break;
      }
      auto& [t, pos] = stack.back();
      ta::Node* node = tasks_[t].node;
      size_t depth = stack.size();
      if (node->topological_nr() >= minTopo) descend(t, true, node->next_edges(), pos);
      if (stack.size() > depth) continue;
      size_t finished = stack.back().first;
      done[finished] = 2;
      stack.pop_back();
      if (!stack.empty() && tasks_[finished].executes()) tasks_[stack.back().first].needed = true;
    }
  }

  // A gradient for `edge` from a node running on `from`.
  void deliver(const ta::Edge& edge, at::Tensor&& grad, const Stream& from) {
    if (!edge.is_valid()) return;
    auto it = index_.find(edge.function.get());
    TORCH_CHECK(it != index_.end() && tasks_[it->second].dependencies > 0,
                "dependency not found for ", edge.function->name());
    Task& t = tasks_[it->second];
    bool ready = --t.dependencies == 0;
    if (!t.executes()) return;
    if (!t.buffered) {
      t.buffer.resize(t.node->num_inputs());
      t.buffered = true;
    }
    addInput(t.buffer, edge.input_nr, std::move(grad), from, t.stream);
    if (ready) ready_.emplace(t.node->sequence_nr(), it->second);
  }

  void evaluate(Task& t) {
    std::optional<c10::StreamGuard> onStream;
    if (t.stream) onStream.emplace(*t.stream);
    std::vector<at::Tensor> inputs = std::move(t.buffer);
    for (const auto& [input, k] : t.captures) {
      captured_[k] = inputs[input];
      if (t.stream) leafStreams_.push_back(*t.stream);
    }
    if (!t.needed) return;
    ta::Node& fn = *t.node;
    std::vector<at::Tensor> outputs;
    try {
      outputs = fn(std::move(inputs));
    } catch (c10::Error& e) {
      e.add_context("in Function " + fn.name());
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string(e.what()) + " (in Function " + fn.name() + ")");
    }
    validateOutputs(fn.next_edges(), outputs, [&](const std::string& msg) {
      return "Function " + fn.name() + " returned an " + msg;
    });
    if (outputs.empty()) {
      if (t.stream) leafStreams_.push_back(*t.stream);
      return;
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      deliver(fn.next_edge(i), std::move(outputs[i]), t.stream);
    }
  }

  // The engine's exec_post_processing: the caller uses the captured gradients
  // on its current streams (sends them right after).
  void syncCallerStreams() {
    for (size_t i = 0; i < leafStreams_.size(); ++i) {
      const c10::Stream& leaf = leafStreams_[i];
      bool seen = false;
      for (size_t j = 0; j < i && !seen; ++j) seen = leafStreams_[j] == leaf;
      if (seen) continue;
      c10::Stream current =
          c10::impl::VirtualGuardImpl(leaf.device_type()).getStream(leaf.device());
      if (current != leaf) orderStreams(leaf, current);
    }
  }

  const ta::edge_list& roots_;
  std::vector<Task> tasks_;
  std::unordered_map<ta::Node*, size_t> index_;
  // Highest sequence number first, as the engine's ready queue.
  std::priority_queue<std::pair<uint64_t, size_t>> ready_;
  std::vector<at::Tensor> captured_;
  std::vector<c10::Stream> leafStreams_;
};

}  // namespace

std::vector<at::Tensor> runLibtorchBackward(const torch::autograd::edge_list& roots,
                                            std::vector<at::Tensor> grads,
                                            const torch::autograd::edge_list& outputs) {
  return torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/true,
                                                               /*create_graph=*/false,
                                                               /*accumulate_grad=*/false, outputs);
}

std::vector<at::Tensor> runLocalBackward(const torch::autograd::edge_list& roots,
                                         std::vector<at::Tensor> grads,
                                         const torch::autograd::edge_list& outputs,
                                         std::string* libtorchReason) {
  validateOutputs(roots, grads, [](const std::string& msg) { return msg; });
  TORCH_CHECK_VALUE(!outputs.empty(), "grad requires non-empty inputs.");
  std::string reason;
  std::optional<Pass> pass;
  if (ta::AnomalyMode::is_enabled()) {
    reason = "anomaly mode is on";
  } else {
    pass.emplace(roots, outputs);
    reason = pass->unsupported();
  }
  if (libtorchReason != nullptr) *libtorchReason = reason;
  if (!reason.empty()) return runLibtorchBackward(roots, std::move(grads), outputs);
  at::AutoGradMode gradMode(false);
  return pass->run(grads, outputs.size());
}

AutogradEngine parseAutogradEngine(const char* value) {
  if (value == nullptr || *value == '\0' || std::string(value) == "thread") {
    return AutogradEngine::kThread;
  }
  if (std::string(value) == "libtorch") return AutogradEngine::kLibtorch;
  throw std::invalid_argument("RPCJOB_AUTOGRAD_ENGINE='" + std::string(value) +
                              "': expected 'thread' or 'libtorch'");
}

AutogradEngine autogradEngine() {
  static const AutogradEngine engine = parseAutogradEngine(std::getenv("RPCJOB_AUTOGRAD_ENGINE"));
  return engine;
}

}  // namespace rpcjob::runtime::autograd
