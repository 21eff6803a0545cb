#!/usr/bin/env bash
# Compiles the CUDA build's sources for syntax only (g++ -fsyntax-only -Wall -Wextra), on a
# machine without a CUDA libtorch: against the CUDA toolkit's runtime headers and Debian's
# libtorch-dev headers (1.13: older than the GPU machine's 2.11, so a call that only 2.11 has
# is reported and is no error of ours: those are listed in `known` below and left out). Catches what a device
# call would otherwise spend its first minutes on. Usage: scripts/cuda-syntax-check.sh [FILE...]
# (default: every file the CUDA build adds). Exit status: 1 when a file has another error.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
cuda=$(ls -d /usr/local/cuda*/include 2>/dev/null | head -1)
if [[ -z $cuda || ! -d /usr/include/c10/cuda ]]; then
  echo "cuda-syntax-check: needs a CUDA toolkit (/usr/local/cuda*/include) and libtorch-dev" >&2
  exit 2
fi
# Two headers the libraries' builds generate, which the packages do not ship.
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
mkdir -p "$shim/c10/cuda/impl" "$shim/tensorpipe"
echo '#pragma once' >"$shim/c10/cuda/impl/cuda_cmake_macros.h"
printf '#pragma once\n#define TENSORPIPE_HAS_CUDA_IPC_CHANNEL 1\n#define TENSORPIPE_HAS_CUDA_GDR_CHANNEL 1\n' \
  >"$shim/tensorpipe/config_cuda.h"
# Calls of libtorch 2.11 that 1.13 lacks (not errors of ours).
known='getDeviceIndexWithPrimaryContext'
files=("$@")
if ((${#files[@]} == 0)); then
  files=(worker/src/cuda/*.cc worker/src/cuda_lane/*.cc worker/src/runtime*.cc
    worker/src/serialization.cc worker/telemetry/src/*.cc tests/gpu/gpu_test.cc
    benchmarks/gpu/gpu_bench.cc)
fi
inc=(-I"$shim" -I"$cuda" -Iworker/include -Iworker/src -Iworker/src/cuda -Iworker/instrument/include
  -Iworker/telemetry/include -Iworker/telemetry/src -Iassignment/include -Imetrics/include
  -Itests/gpu -I/usr/include/torch/csrc/api/include)
failed=0
for f in "${files[@]}"; do
  out=$(g++ -std=c++17 -fsyntax-only -Wall -Wextra -DRPCJOB_WITH_CUDA=1 -DRPCJOB_HAS_INSTRUMENT=1 \
    "${inc[@]}" "$f" 2>&1 | grep -E 'error|warning' | grep -v "$known")
  if [[ -n $out ]]; then
    echo "== $f"
    echo "$out"
    failed=1
  fi
done
((failed == 0)) && echo "cuda-syntax-check: ${#files[@]} files, no error but the known ($known)"
exit $failed
