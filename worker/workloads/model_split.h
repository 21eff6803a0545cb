#pragma once
// The seeds' model-split experiment (cuda-rpc-recipe) as a built-in workload of
// rpcjob-worker: a model of one linear layer (size x size) per worker, the master
// (rank 0) holding the first and driving forward passes through all of them over
// RPC, in rank order. The master makes every layer's weights and sends each
// shard its own (as `rpc.remote(MyModule, ...)` builds the remote module in the
// recipe), so it can check the distributed result against the same model run
// locally. Forward passes only: the runtime has no distributed autograd yet.
//
//   rpcjob-worker model-split [--iterations N] [--size N]
//
// Output (rank 0), one line:
//   model-split: 10 forward passes through 2 layers (1000x1000, batch 1000) on 2 workers
//   in 0.123 s (12.3 ms/pass); checksum 12.345678; matches local: yes

#include <string>

#include "rpcjob/runtime/runtime.h"

namespace rpcjob::worker {

struct ModelSplitConfig {
  int size = 1000;      // features in and out of every layer, and the batch
  int iterations = 10;  // forward passes
};

struct ModelSplitResult {
  int workers = 0;
  double seconds = 0;
  double checksum = 0;  // sum of the last output
  bool matchesLocal = false;
};

// Every worker, before Runtime::start(): the shard's functions.
void registerModelSplit(runtime::Runtime& rt);
// Rank 0, after start(): builds the model, runs the passes, checks the result.
ModelSplitResult runModelSplit(runtime::Runtime& rt, const ModelSplitConfig& config);
std::string toText(const ModelSplitResult& result, const ModelSplitConfig& config);

}  // namespace rpcjob::worker
