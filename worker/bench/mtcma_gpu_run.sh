#!/usr/bin/env bash
# One device call on the GPU host (nvidia-h200, carry .gpudeps): builds rpcjob-bench
# and rpcjob-worker with the gpu preset (tests/gpu/run-all.sh's exports), then
# rpcjob-bench --json 3 times (default channels: rpcjob_cma first) and a 2-worker
# `rpcjob-worker bench` table of rpcjob_cma against stock cma in the same run.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export DEPS=$PWD/.gpudeps/root TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
export CMAKE_PREFIX_PATH=$DEPS/usr:$DEPS/usr/lib/x86_64-linux-gnu/cmake:$TORCH_DIR/share/cmake
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$TORCH_DIR/lib:${LD_LIBRARY_PATH:-}
rm -rf "$DEPS/usr/share/cmake/Tensorpipe" "$DEPS"/usr/lib/x86_64-linux-gnu/libtensorpipe.so*
T0=$SECONDS
cmake --preset gpu -DRPCJOB_BUILD_OPERATOR=OFF -DTensorpipe_INCLUDE_DIR=$TORCH_DIR/include \
  -DRPCJOB_TENSORPIPE_EXTRA_INCLUDE_DIR="$(tests/gpu/tensorpipe-include.sh)" >"$OUT/configure.log" 2>&1 &&
  cmake --build build-gpu -j16 --target rpcjob-bench rpcjob-worker >"$OUT/build.log" 2>&1 ||
  { grep -B3 -A20 -m3 error "$OUT/build.log" | head -80; tail -20 "$OUT/configure.log"; exit 1; }
echo "build: $((SECONDS - T0)) s; nproc $(nproc); ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo none)"
for i in 1 2 3; do build-gpu/worker/rpcjob-bench --json | tee -a "$OUT/bench.json"; done
P=$((20000 + RANDOM % 20000))
PEERS="b0@127.0.0.1:$P,b1@127.0.0.1:$((P + 1))"
RPCJOB_PEERS=$PEERS RPCJOB_WORKER_NAME=b1 timeout 200 build-gpu/worker/rpcjob-worker bench &
RPCJOB_PEERS=$PEERS RPCJOB_WORKER_NAME=b0 timeout 200 build-gpu/worker/rpcjob-worker bench \
  --channels rpcjob_cma,cma | tee "$OUT/pair_table.txt"
wait
echo "total: $((SECONDS - T0)) s"
