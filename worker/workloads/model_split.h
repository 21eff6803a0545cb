#pragma once
// The seeds' model-split experiment (cuda-rpc-recipe) as a built-in workload of
// rpcjob-worker: a model of one linear layer (size x size) per worker, the master
// (rank 0) holding the first and driving forward passes through all of them over
// RPC, in rank order. The master makes every layer's weights and sends each
// shard its own (as `rpc.remote(MyModule, ...)` builds the remote module in the
// recipe), so it can check the distributed result against the same model run
// locally. With --backward, every pass also runs distributed autograd's backward
// from the output's sum in a context of its own (the recipe's loop), and the
// last pass's gradients on every worker are checked against local ones.
// On CUDA when the assignment gives the workers GPUs (gpusPerWorker: 1): the
// master's layer on cuda:<its gpus[0]>, each shard's on its own GPU, and the
// activations go GPU to GPU through the assignment's device maps.
//
//   rpcjob-worker model-split [--iterations N] [--size N] [--backward]
//
// Output (rank 0), one line:
//   model-split: 10 forward passes through 2 layers (1000x1000, batch 1000) on 2 workers
//   (cpu) in 0.123 s (12.3 ms/pass); checksum 12.345678; matches local: yes

#include <set>
#include <string>

#include "rpcjob/assignment/assignment.h"
#include "rpcjob/runtime/runtime.h"

namespace rpcjob::worker {

struct ModelSplitConfig {
  int size = 1000;        // features in and out of every layer, and the batch
  int iterations = 10;    // forward passes
  bool backward = false;  // and a distributed backward pass after each (rank 0 decides)
  // Where this worker's layer lives: "cuda:<gpus[0]>" when its assignment entry
  // has GPUs, else "cpu" (set by placeModelSplit).
  std::string device = "cpu";
  // Peers whose device map takes this worker's device (rank 0 sends them its
  // CUDA tensors as they are: they arrive on the peer's GPU, and the answers
  // come back by the inverse map). Other peers get CPU tensors and move them
  // to their own device themselves.
  std::set<std::string> mappedPeers;
};

// Fills config.device and config.mappedPeers from the assignment entry of `worker`.
void placeModelSplit(const Assignment& assignment, const std::string& worker,
                     ModelSplitConfig& config);

struct ModelSplitResult {
  int workers = 0;
  double seconds = 0;
  double checksum = 0;  // sum of the last output
  bool matchesLocal = false;
  bool gradientsMatch = false;  // with backward: every layer's, on every worker
};

// Every worker, before Runtime::start(): the shard's functions. The shard keeps
// its layer on config.device and answers on the device the input arrived on.
void registerModelSplit(runtime::Runtime& rt, const ModelSplitConfig& config);
// Rank 0, after start(): builds the model, runs the passes, checks the result.
ModelSplitResult runModelSplit(runtime::Runtime& rt, const ModelSplitConfig& config);
std::string toText(const ModelSplitResult& result, const ModelSplitConfig& config);

}  // namespace rpcjob::worker
