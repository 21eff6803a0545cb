#!/usr/bin/env bash
# The README's main job: set up, build, and run a real RpcJob on this machine: the
# transfer benchmark between local workers, planned and launched by `rpcjob run`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh build
cmake --preset default -DRPCJOB_BUILD_TESTS=OFF -DRPCJOB_BUILD_OPERATOR=OFF >/dev/null
cmake --build build -j "$(nproc)" --target rpcjob rpcjob-worker
exec build/runner/rpcjob run examples/transfer-bench.yaml "$@"
