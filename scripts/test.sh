#!/usr/bin/env bash
# The README's test command: set up, configure, build, run every test and the
# static checks. Exits non-zero on any failure. Prints how long each phase took.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${RPCJOB_JOBS:-$(nproc)}

declare -a phases=()
phase() {  # phase NAME COMMAND...
  local name=$1 start=$SECONDS; shift
  echo "=== $name"
  "$@"
  phases+=("$(printf '%-10s %4ds' "$name" $((SECONDS - start)))")
}
report() {
  echo "=== phase times"
  printf '  %s\n' "${phases[@]}"
}
trap report EXIT

phase setup scripts/setup.sh test
phase control-plane tests/kube/control-plane.sh build
# Explicit: main-job.sh configures the same build folder with the operator and tests off.
phase configure cmake --preset default -DRPCJOB_BUILD_OPERATOR=ON -DRPCJOB_BUILD_WORKER=ON -DRPCJOB_BUILD_TESTS=ON
phase build cmake --build build -j "$jobs"
phase test ctest --test-dir build --output-on-failure -j "$jobs"
phase static scripts/static-checks.sh
