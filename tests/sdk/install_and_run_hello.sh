#!/bin/bash
# The SDK end to end, as a new user follows examples/hello/README.md:
#   1. cmake --install this build into a fresh prefix; the package names nothing
#      of this checkout, only the public headers are there, and the installed
#      rpcjob and rpcjob-worker start from there;
#   2. configure and build examples/hello with find_package(rpcjob) from that
#      prefix (no package registry, nothing of the build tree on any path);
#   3. run it with the installed `rpcjob run` on examples/hello/hello.yaml: every
#      worker got an answer (a string and a tensor) from every peer, each worker
#      exited 0, and the run's per-channel summary shows, for every worker, at
#      least the tensors it sent and received by channel (rpcjob::telemetry's
#      metrics file): so hello's metrics are exported as rpcjob-worker's are.
set -euo pipefail

while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2 ;;
    --source) src=$2 ;;
    --work) work=$2 ;;
    --cmake) cmake=$2 ;;
    --generator) generator=$2 ;;
    --cxx) cxx=$2 ;;
    --launcher) launcher=$2 ;;
    --prefix-path) prefix_path=$2 ;;
    *) echo "usage: $0 --build DIR --source DIR --work DIR --cmake CMAKE ..." >&2; exit 2 ;;
  esac
  shift 2
done
. "$(dirname "$0")/example_build.sh"

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

echo "== cmake --install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log" \
  || { cat "$work/install.log"; fail "cmake --install"; }
package=$prefix/lib/cmake/rpcjob
for f in rpcjobConfig.cmake rpcjobConfigVersion.cmake rpcjobTargets.cmake FindTensorpipe.cmake; do
  [ -f "$package/$f" ] || fail "$package/$f not installed"
done
# Relocatable: no path into this checkout or its build tree, nor any other
# absolute path (this machine's libtorch, yaml-cpp...): the user's own are found.
if grep -n -F -e "$src" -e "$build/" "$package"/*.cmake; then
  fail "the installed package names the source or build tree (above)"
fi
if grep -n -E '("|;)/' "$package"/rpcjob*.cmake | grep -v -E ':[0-9]+: *#|_IMPORT_PREFIX STREQUAL "/"'; then
  fail "the installed package has absolute paths (above)"
fi
for h in rpcjob/runtime/runtime.h rpcjob/runtime/future.h rpcjob/runtime/rref.h \
         rpcjob/assignment/assignment.h rpcjob/assignment/environment.h rpcjob/version.h \
         rpcjob/telemetry/exporter.h; do
  [ -f "$prefix/include/$h" ] || fail "public header $h not installed"
done
private=$(cd "$prefix/include" && find . -type f | grep -v -E '^\./rpcjob/((runtime|assignment|telemetry)/[a-z_]+\.h|version\.h)$' || true)
[ -z "$private" ] || fail "not public headers installed: $private"
# The installed programs start from the prefix (a shared build: their libraries came along).
version=$(cat "$src/VERSION")
for program in rpcjob rpcjob-worker; do
  out=$("$prefix/bin/$program" --version 2>&1) || fail "installed $program does not start: $out"
  [ "$out" = "$program $version" ] || fail "installed $program --version: $out"
done

configure_example hello
grep -q -F -- "-- rpcjob $version from $package" "$work/configure.log" \
  || { cat "$work/configure.log"; fail "rpcjob was not found in $package"; }
if grep -n -F -e "$build/" "$work/build/CMakeCache.txt" | grep -v -F "$work"; then
  fail "the build tree is visible to examples/hello (above)"
fi

build_example hello

echo "== rpcjob run examples/hello/hello.yaml"
set +e
PATH="$work/build:$prefix/bin:$PATH" "$prefix/bin/rpcjob" run "$src/examples/hello/hello.yaml" \
  --run-dir "$work/run" --grace-period 2 > "$work/run.log" 2>&1
rc=$?
set -e
cat "$work/run.log"
[ "$rc" -eq 0 ] || fail "rpcjob run exited $rc"
workers=3
elements=32768  # examples/hello/main.cc: 128 KiB of float, above the inline limit
for ((i = 0; i < workers; i++)); do
  for ((j = 0; j < workers; j++)); do
    [ "$i" -eq "$j" ] && continue
    line="[worker$i] worker$i: worker$j answered \"hello worker$i, this is worker$j (rank $j)\"; sum(ones($elements) + its rank) = $((elements * (1 + j)))"
    grep -q -F -- "$line" "$work/run.log" || fail "missing: $line"
  done
  grep -q -F -- "[worker$i] worker$i: rank $i of $workers, rpcjob $version" "$work/run.log" \
    || fail "worker$i did not report its identity"
  grep -q -F -- "[worker$i] worker$i: done" "$work/run.log" || fail "worker$i did not shut down"
  grep -q -E "^worker$i +$i +0 " "$work/run.log" || fail "worker$i did not exit 0 (summary)"
done
# The summary: a worker's first row "NAME RANK EXIT RESTARTS CHANNEL SENT RECEIVED",
# its other channels on rows of their own below it ("CHANNEL SENT RECEIVED");
# sizes as "128.0 KiB". Each worker sent its tensors to, and got the answers
# from, every peer by channel: at least (workers - 1) x 128 KiB both ways.
traffic=$(awk -v workers="$workers" '
  function bytes(value, unit) {
    return value * (unit == "KiB" ? 1024 : unit == "MiB" ? 1048576 : unit == "GiB" ? 1073741824 : 1)
  }
  /^WORKER +RANK +EXIT/ { table = 1; next }
  table && $0 ~ /^worker[0-9]+ / {
    worker = $1
    if (NF == 9) { sent[worker] += bytes($6, $7); received[worker] += bytes($8, $9) }
    seen[worker] = 1
    next
  }
  table && $0 ~ /^ +[a-z_]+ / && worker != "" && NF == 5 {
    sent[worker] += bytes($2, $3); received[worker] += bytes($4, $5)
  }
  END { for (w in seen) printf "%s %d %d\n", w, sent[w], received[w] }' "$work/run.log")
echo "per-worker channel bytes (sent, received):"
echo "$traffic"
for ((i = 0; i < workers; i++)); do
  read -r _ sent received < <(grep "^worker$i " <<< "$traffic") \
    || fail "worker$i has no row in the summary"
  least=$(( (workers - 1) * elements * 4 ))
  [ "$sent" -ge "$least" ] || fail "worker$i sent $sent bytes by channel, expected >= $least"
  [ "$received" -ge "$least" ] \
    || fail "worker$i received $received bytes by channel, expected >= $least"
done
echo "PASS: $workers workers, every one answered by every peer, channel bytes in the summary"
