#!/usr/bin/env bash
# The README's main job: set up, build, and run a real RpcJob on this machine: the
# seeds' model split (the CUDA RPC recipe, examples/model-split/), built the way a
# user builds a program of their own (rpcjob installed as an SDK, the program
# against it with find_package(rpcjob)), planned and launched by `rpcjob run`. It
# prints the recipe's line and the gradient check, and `rpcjob run` ends with the
# bytes each worker moved per channel. Why this seed: it runs in seconds on a CPU
# and goes through the whole stack (remote objects, distributed autograd, channels,
# metrics); examples/resnet-pipeline.yaml takes minutes on a CPU at the tutorial's
# sizes. Arguments go to `rpcjob run` (e.g. --run-dir DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh build
cmake --preset default -DRPCJOB_BUILD_TESTS=OFF -DRPCJOB_BUILD_OPERATOR=OFF \
  -DRPCJOB_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build -j "$(nproc)"
prefix=$root/build/sdk
cmake --install build --prefix "$prefix" >/dev/null
cmake -S examples/model-split -B build/model-split -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build/model-split -j "$(nproc)"
PATH=$root/build/model-split:$prefix/bin:$PATH exec "$prefix/bin/rpcjob" run examples/model-split.yaml "$@"
