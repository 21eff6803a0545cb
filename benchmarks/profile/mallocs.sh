#!/usr/bin/env bash
# Usage: benchmarks/profile/mallocs.sh DIR [--quick]
# malloc calls of an `rpcjob-worker bench` pair (DIR/rpcjob-worker: the caller, then the
# server), counted by a uprobe on glibc's malloc (root; `perf probe -x LIBC -a malloc` once).
# Run it with and without --quick: the difference over the difference in calls (about 113k, most
# of them async) is the allocations per call, start-up left out. Deterministic where timings are
# not: the figure to compare builds by on a loaded machine.
set -uo pipefail
d=$1
extra=()
[[ ${2:-} == --quick ]] && extra=(--quick)
p0=$((20000 + RANDOM % 20000))
peers="bench0@127.0.0.1:$p0,bench1@127.0.0.1:$((p0 + 1))"
out=$(mktemp /tmp/mallocs-XXXXXX)
RPCJOB_PEERS=$peers RPCJOB_WORKER_NAME=bench1 perf stat -x, -o "$out" -e probe_libc:malloc -- \
  "$d/rpcjob-worker" serve --deadline-s 60 >/dev/null 2>&1 &
server=$!
caller=$(RPCJOB_PEERS=$peers RPCJOB_WORKER_NAME=bench0 perf stat -x, -e probe_libc:malloc -- \
  "$d/rpcjob-worker" bench --json --channels auto --no-large "${extra[@]}" 2>&1 >/dev/null |
  grep probe_libc | cut -d, -f1)
wait $server
echo "caller $caller server $(grep probe_libc "$out" | cut -d, -f1)"
rm -f "$out"
