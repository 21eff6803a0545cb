#!/usr/bin/env bash
# Usage: benchmarks/profile/ab-base.sh ROUNDS [BASE_DIR]
# A/B of this tree against another commit, in one session, alternating runs (ab.sh).
# Here, once: `git worktree add .base REV` and `echo /.base/ >> .git/info/exclude`; on the GPU
# machine carry `.base` (and `.gpudeps`) and run `tests/gpu/run-all.sh build` first. This
# builds the bench's programs of BASE_DIR (default .base) with the same preset as this tree
# (PRESET, default gpu; `default` on a CPU machine, after `cmake --build build`), then runs
# `ab.sh ROUNDS BASE_DIR/<build>/worker <build>/worker`. The builds' figures drift together on a
# shared machine, so only alternating runs compare them (2026-11-29-h200x1-session4.md: one
# build's async rate spread 528 k-997 k calls/s within one call).
set -uo pipefail
rounds=$1
base=${2:-.base}
preset=${PRESET:-gpu}
[[ -d $base ]] || { echo "no $base: git worktree add $base REV" >&2; exit 2; }
targets=(rpcjob-bench rpcjob-worker rpcjob-tp-floor rpcjob-lane-floor)
args=()
build=build
if [[ $preset == gpu ]]; then
  build=build-gpu
  export DEPS=$PWD/.gpudeps/root
  TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))') || exit 1
  export TORCH_DIR CMAKE_PREFIX_PATH=$DEPS/usr:$DEPS/usr/lib/x86_64-linux-gnu/cmake:$TORCH_DIR/share/cmake
  export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$TORCH_DIR/lib:${LD_LIBRARY_PATH:-}
  tp=$(tests/gpu/tensorpipe-include.sh) || exit 1
  args=(-DRPCJOB_BUILD_OPERATOR=OFF -DTensorpipe_INCLUDE_DIR="$TORCH_DIR/include"
    -DRPCJOB_TENSORPIPE_EXTRA_INCLUDE_DIR="$tp")
fi
log=$(mktemp /tmp/ab-base-XXXXXX.log)
# The floors are not in run-all.sh's build; ab.sh runs them beside each bench.
if ! cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >"$log" 2>&1; then
  echo "this tree's build failed: $log" >&2
  exit 1
fi
if ! (cd "$base" && cmake --preset "$preset" "${args[@]}" >"$log" 2>&1 &&
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >>"$log" 2>&1); then
  echo "$base's build failed: $log" >&2
  tail -20 "$log" >&2
  exit 1
fi
echo "A/B: $(git -C "$base" log --oneline -1 | cut -c1-60) against $(git log --oneline -1 | cut -c1-60)"
exec bash "$(dirname "$0")/ab.sh" "$rounds" "$base/$build/worker" "$build/worker"
