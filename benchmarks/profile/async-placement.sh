#!/usr/bin/env bash
# Usage: benchmarks/profile/async-placement.sh DIR [RUNS]
# Whether where the two processes' threads run decides rpcjob-bench's async rate
# (issue 22: fresh process pairs of the same build on one GPU host land at ~0.8 M
# or ~1.5 M calls/s). Runs an `rpcjob-worker bench` pair from DIR RUNS times
# (default 3) in each placement:
#   unpinned      as rpcjob-bench runs them;
#   near          server on CPUs 0-3, caller on 4-7;
#   shared        both on CPUs 0-7;
#   far           server on 0-3, caller on the four CPUs half the machine away;
#   siblings      (SMT machines) server on 0-3, caller on those CPUs' siblings.
# $OUT/async-placement.txt: the machine's CPU topology as the guest sees it, then per
# run the placement, async and CallBatch calls/s and the small-call p50, then the drift
# within single pairs (below).
set -uo pipefail
d=$1 runs=${2:-3}
OUT=${OUT:-$PWD/perf-out}
mkdir -p "$OUT"
n=$(nproc)
half=$((n / 2))
sys=/sys/devices/system/cpu
siblings() {  # the SMT siblings of CPUs 0-3 other than themselves, comma-separated
  for c in 0 1 2 3; do tr ',' '\n' <"$sys/cpu$c/topology/thread_siblings_list"; done |
    awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }' |
    awk '$1 > 3' | sort -un | paste -sd,
}
# name, server CPUs, caller CPUs ("" = unpinned)
placements=("unpinned||")
if ((n >= 16)); then  # pinned placements need CPUs 0-7 and four half the machine away
  placements+=("near|0-3|4-7" "shared|0-7|0-7" "far|0-3|$half-$((half + 3))")
  sib=$(siblings)
  [[ -n $sib ]] && placements+=("siblings|0-3|$sib")
fi
{
  echo "# $n CPUs; lscpu:"
  lscpu | grep -E 'Model name|Socket|Core|Thread|NUMA|L2|L3' | sed 's/^/  /'
  echo "# CPU package core L3-sharing (from $sys):"
  for c in $(seq 0 $((n - 1))); do
    printf '  cpu%s %s %s %s\n' "$c" "$(cat $sys/cpu$c/topology/physical_package_id 2>/dev/null)" \
      "$(cat $sys/cpu$c/topology/core_id 2>/dev/null)" \
      "$(cat $sys/cpu$c/cache/index3/shared_cpu_list 2>/dev/null)"
  done | awk '{k = $3 " " $4 " " $5; if (!(k in seen)) {seen[k] = 1; print} else n++} END {if (n) print "  ... " n " more CPUs alike"}'
  echo "# placement  server-cpus  caller-cpus  async/s  batched/s  small-p50-us"
} >"$OUT/async-placement.txt"
pin() { [[ -n $1 ]] && echo "taskset -c $1"; }
# The serving half of a bench pair, on fresh ports (on CPUs $1 if given): sets $peers, for
# the caller, and $server.
serve() {
  local p0=$((20000 + RANDOM % 20000))
  peers="bench0@127.0.0.1:$p0,bench1@127.0.0.1:$((p0 + 1))"
  # shellcheck disable=SC2046  # pin's words are meant to split
  RPCJOB_PEERS=$peers RPCJOB_WORKER_NAME=bench1 $(pin "${1:-}") "$d/rpcjob-worker" serve \
    --deadline-s 60 >/dev/null 2>>"$OUT/async-placement.err" &
  server=$!
}
field() { grep -o "\"$1\":[^,}]*" <<<"$json" | head -1 | cut -d: -f2; }  # of the bench's $json
for round in $(seq 1 "$runs"); do
  for p in "${placements[@]}"; do
    IFS='|' read -r name scpu ccpu <<<"$p"
    serve "$scpu"
    # shellcheck disable=SC2046
    json=$(RPCJOB_PEERS=$peers RPCJOB_WORKER_NAME=bench0 $(pin "$ccpu") "$d/rpcjob-worker" \
      bench --json --channels auto --no-large 2>>"$OUT/async-placement.err")
    wait $server
    printf '%-10s  %-11s  %-11s  %8.0f  %9.0f  %s\n' "$name" "${scpu:--}" "${ccpu:--}" \
      "$(field async_calls_per_s)" "$(field async_batched_calls_per_s)" \
      "$(field small_rtt_p50_us)" >>"$OUT/async-placement.txt"
  done
done
# Then DRIFT_PAIRS unpinned pairs (default 3), each timing DRIFT_ROUNDS rounds (default
# 40) of the async phase in a row: a rate that wanders within one pair is the host's
# doing; one that holds within a pair and differs between pairs is the pair's threads'.
echo "# drift: per unpinned pair, each round's async calls/s in order (min / median / max)" \
  >>"$OUT/async-placement.txt"
for pair in $(seq 1 "${DRIFT_PAIRS:-3}"); do
  serve
  rounds=$OUT/drift-$pair.rounds
  RPCJOB_PEERS=$peers RPCJOB_WORKER_NAME=bench0 RPCJOB_BENCH_ASYNC_ROUNDS=${DRIFT_ROUNDS:-40} \
    RPCJOB_BENCH_ASYNC_PLAIN=1 "$d/rpcjob-worker" bench --json --channels auto --no-large \
    >/dev/null 2>"$rounds" &
  caller=$!
  # Where each thread ran, per round ($OUT/drift-N.cpus: drift_cpus.py says what).
  python3 "$(dirname "$0")/drift_cpus.py" "$rounds" $server $caller >"$OUT/drift-$pair.cpus" &
  sampler=$!
  wait $caller
  wait $server
  wait $sampler
  rates=$(awk '/^async round/ {print $4}' "$rounds")
  summary=$(sort -n <<<"$rates" | awk '{a[NR] = $1} END {if (NR) printf "%d / %d / %d", a[1], a[int((NR + 1) / 2)], a[NR]}')
  echo "pair $pair: $summary: $(paste -sd' ' <<<"$rates")" >>"$OUT/async-placement.txt"
done
cat "$OUT/async-placement.txt"
