#!/usr/bin/env bash
# Usage: benchmarks/profile/ab.sh ROUNDS DIR...
# A/B of builds in one session: each DIR holds a build's rpcjob-bench, rpcjob-worker and
# rpcjob-tp-floor (copy them out of build/worker/ after each build). Runs
# `rpcjob-bench --no-large --json` ROUNDS times per DIR, alternating DIRs, and prints the
# medians of the small-call figures. On a shared machine the figures drift by tens of percent
# over minutes; alternating puts both builds under the same drift.
set -uo pipefail
rounds=$1
shift
log=$(mktemp /tmp/ab-XXXXXX.log)
for ((i = 0; i < rounds; i++)); do
  for d in "$@"; do
    line=$("$d/rpcjob-bench" --no-large --json --worker "$d/rpcjob-worker" \
      --floor "$d/rpcjob-tp-floor" 2>/dev/null | grep '^{')
    echo "$d $line" >>"$log"
  done
done
python3 - "$log" "$@" <<'PY'
import json, statistics, sys
log, dirs = sys.argv[1], sys.argv[2:]
rows = {d: [] for d in dirs}
for line in open(log):
    d, _, j = line.partition(" ")
    try:
        rows[d].append(json.loads(j))
    except ValueError:
        pass  # a failed run
keys = ["small_rtt_p50_us", "small_rtt_p99_us", "async_calls_per_s",
        "async_batched_calls_per_s", "tp_small_rtt_p50_us"]
print("%-28s" % "median (runs)", *["%24s" % d.rstrip("/").split("/")[-1] for d in dirs])
for k in keys:
    cells = []
    for d in dirs:
        v = [r[k] for r in rows[d] if k in r]
        cells.append("%24s" % ("%.2f (%d)" % (statistics.median(v), len(v)) if v else "-"))
    print("%-28s" % k, *cells)
PY
echo "(runs: $log)"
