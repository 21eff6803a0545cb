#!/usr/bin/env bash
# Usage: benchmarks/profile/ab.sh ROUNDS VARIANT...
# A/B of builds, or of settings, in one session. A VARIANT is DIR or DIR@VAR=V[,VAR=V...]:
# DIR holds a build's rpcjob-bench, rpcjob-worker, rpcjob-tp-floor and rpcjob-lane-floor
# (copy them out of build/worker/ after each build, or name build/worker itself), and the
# settings after @ go into that variant's environment (both of its processes inherit them).
# Runs `rpcjob-bench --no-large --json` ROUNDS times per VARIANT, alternating them, and
# prints the medians of the small-call and 4 MB figures. On a shared machine the figures
# drift by tens of percent over minutes; alternating puts every variant under the same drift.
set -uo pipefail
rounds=$1
shift
log=$(mktemp /tmp/ab-XXXXXX.log)
for ((i = 0; i < rounds; i++)); do
  for v in "$@"; do
    d=${v%%@*}
    settings=()
    [[ $v == *@* ]] && IFS=, read -ra settings <<<"${v#*@}"
    line=$(env "${settings[@]}" "$d/rpcjob-bench" --no-large --json --worker "$d/rpcjob-worker" \
      --floor "$d/rpcjob-tp-floor" --lane-floor "$d/rpcjob-lane-floor" 2>/dev/null | grep '^{')
    echo "$v $line" >>"$log"
  done
done
python3 - "$log" "$@" <<'PY'
import json, statistics, sys
log, variants = sys.argv[1], sys.argv[2:]
rows = {v: [] for v in variants}
for line in open(log):
    v, _, j = line.partition(" ")
    try:
        rows[v].append(json.loads(j))
    except ValueError:
        pass  # a failed run
keys = ["small_rtt_p50_us", "small_rtt_p99_us", "async_calls_per_s",
        "async_batched_calls_per_s", "tp_small_rtt_p50_us", "rtt_4mb_ms", "rtt_4mb_shared_ms"]
def name(v):
    d, _, s = v.partition("@")
    return (d.rstrip("/") + ("@" + s if s else ""))[-30:]  # the path: two builds both end in worker
print("%-28s" % "median (runs)", *["%31s" % name(v) for v in variants])
for k in keys:
    cells = []
    for v in variants:
        x = [r[k] for r in rows[v] if k in r]
        cells.append("%31s" % ("%.3f (%d)" % (statistics.median(x), len(x)) if x else "-"))
    print("%-28s" % k, *cells)
PY
echo "(runs: $log)"
