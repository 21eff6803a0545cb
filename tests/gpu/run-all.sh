#!/usr/bin/env bash
# One call on the GPU machine: configure and build the `gpu` preset, run the GPU
# tests, the GPU benchmark (ours beside PyTorch's RPC, same run) and the CPU
# rpcjob-bench. Logs and results under $OUT (or ./gpu-out). Usage, from the
# repository root, with .gpudeps carried: tests/gpu/run-all.sh [build|test|bench|all]
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export DEPS=$PWD/.gpudeps/root TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
export CMAKE_PREFIX_PATH=$DEPS/usr:$DEPS/usr/lib/x86_64-linux-gnu/cmake:$TORCH_DIR/share/cmake
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$TORCH_DIR/lib:${LD_LIBRARY_PATH:-}
what=${1:-all}
B=build-gpu
if [[ $what == all || $what == build ]]; then
  (cmake --preset gpu -DRPCJOB_BUILD_OPERATOR=OFF -DTensorpipe_INCLUDE_DIR=$TORCH_DIR/include >"$OUT/configure.log" 2>&1 &&
    cmake --build $B -j16 --target rpcjob_gpu_test rpcjob-gpu-bench >"$OUT/build.log" 2>&1) ||
    { grep -B5 -A25 -m3 "error" "$OUT/build.log" | head -120; tail -30 "$OUT/configure.log"; exit 1; }
  echo "build ok"
  cmake --build $B -j16 --target rpcjob-bench >"$OUT/build_cpu_bench.log" 2>&1 ||
    { echo "rpcjob-bench build failed"; grep -m3 -A10 error "$OUT/build_cpu_bench.log"; }
fi
if [[ $what == all || $what == test ]]; then
  timeout 280 $B/tests/gpu/rpcjob_gpu_test --gtest_output=xml:"$OUT/gpu_test.xml" >"$OUT/gpu_test.log" 2>&1
  echo "gpu tests rc=$?"; grep -E "^\[ *(OK|FAILED|PASSED) " "$OUT/gpu_test.log" | tail -40
  grep -B2 -A6 "Failure" "$OUT/gpu_test.log" | head -60
fi
if [[ $what == all || $what == bench ]]; then
  R=$OUT/bench.jsonl; : >"$R"
  for ch in "" "cuda_ipc,basic"; do
    RPCJOB_GPU_CHANNELS=$ch timeout 100 $B/tests/gpu/rpcjob-gpu-bench >>"$R" 2>>"$OUT/bench.err"
  done
  RPCJOB_NVLINK_COPY=kernel timeout 100 $B/tests/gpu/rpcjob-gpu-bench | sed 's/"cuda_nvlink"/"cuda_nvlink (kernel copy)"/' >>"$R" 2>>"$OUT/bench.err"
  PYTHONUNBUFFERED=1 timeout 150 python3 benchmarks/gpu/torch_rpc_bench.py 29517 2>>"$OUT/bench.err" | grep '^{' >>"$R"
  timeout 120 $B/worker/rpcjob-bench --json >"$OUT/cpu_bench.json" 2>>"$OUT/bench.err"
  python3 benchmarks/gpu/table.py "$R" "$OUT/cpu_bench.json" | tee "$OUT/table.md"
  tail -20 "$OUT/bench.err"
fi
