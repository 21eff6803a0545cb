#!/usr/bin/env bash
# Usage: [PART=recipe|400mb] benchmarks/profile/gpu-bench-threads.sh GPU_BENCH [SECONDS]
# Where each thread of both processes spends its time while rpcjob-gpu-bench repeats
# one part (issue 20), sampled after START seconds (default 8: start-up and warm-up
# are over) for SECONDS (default 4):
#   recipe (default)  the CUDA RPC recipe (10 x forward and distributed backward across
#                     two processes), RPCJOB_BENCH_RECIPE_REPEAT=REPEAT (default 3000);
#   400mb             the 400 MB CUDA round trip, RPCJOB_BENCH_400MB_ROUNDS=REPEAT
#                     (default 6000, about 13 s).
# Writes $OUT/PART-threads.txt: per thread its futex calls and context switches (1 s),
# its share of the samples and its top symbols (the CUDA driver has none: its share
# shows as one library). A host step the trace shows as slow (trace_timeline.py) is
# either waiting (futex, few samples) or working (its symbols here).
set -uo pipefail
bench=$1 seconds=${2:-4}
source "$(dirname "$0")/perf-env.sh"  # $OUT, $perf, perf_events
part=${PART:-recipe}
case $part in
  recipe) repeat=(RPCJOB_BENCH_RECIPE_REPEAT=${REPEAT:-3000}) ;;
  400mb) repeat=(RPCJOB_BENCH_400MB_ROUNDS=${REPEAT:-6000}) ;;
  *) echo "gpu-bench-threads: PART=$part: not recipe or 400mb" >&2; exit 2 ;;
esac
name=$part-threads
env RPCJOB_BENCH_ONLY="$part" "${repeat[@]}" "$bench" >"$OUT/$name.json" 2>"$OUT/$name.err" &
driver=$!
sleep "${START:-8}"
# The driver and the worker it started (pgrep -f also matched short-lived shells,
# and perf refuses a list with a pid gone).
pids=$(echo "$driver" $(pgrep -P "$driver") | tr ' ' ',')
[[ -n $pids ]] || { echo "gpu-bench-threads: no process of $bench" >&2; exit 1; }
events=$(perf_events)
data=/tmp/perf-$name.data
# perf's own complaints (no permission for perf events here, a pid gone) are kept.
"$perf" stat -e syscalls:sys_enter_futex,context-switches --per-thread -p "$pids" \
  -o /tmp/$name.stat -- sleep 1 >/dev/null 2>"$OUT/$name.perf.err"
# Frame-pointer stacks: they break in libcuda and in our build, so inclusive times are
# lower bounds. (Stacks unwound from copies of the stack, --call-graph dwarf, were tried
# on 2 x H200: the reports below took over 300 s for 4 s of two processes.)
hz=4000
"$perf" record -q -F $hz -e "$events" -g -p "$pids" -o "$data" -- sleep "$seconds" \
  >/dev/null 2>>"$OUT/$name.perf.err"
kill "$driver" 2>/dev/null
wait "$driver" 2>/dev/null
{
  echo "# $part repeated, $seconds s of pids $pids (driver $driver), events $events"
  if [[ $part == recipe ]]; then
    grep -c "repeat" "$OUT/$name.err" | sed 's/^/recipes done: /'
    grep "repeat" "$OUT/$name.err" | awk '{print $(NF-1)}' | sort -n |
      awk '{a[NR]=$1} END {if (NR) print "recipe CUDA RPC, median of", NR, "repeats:", a[int((NR+1)/2)], "s"}'
  fi
  [[ -s $OUT/$name.perf.err ]] && sed 's/^/perf: /' "$OUT/$name.perf.err" | head -5
  echo "## per thread, 1 s: futex calls, context switches"
  grep -E 'futex|switches' /tmp/$name.stat | sort -k2 -n -r | awk '$2 > 50' | head -30
  echo "## by process and thread"
  "$perf" report -i "$data" --stdio --no-children --sort pid -g none -q 2>&1 |
    grep -v '^$' | head -40
  for tid in $("$perf" report -i "$data" --stdio --no-children --sort pid -g none -q 2>/dev/null |
    awk '$1+0 >= 1.5 {split($2, a, ":"); print a[1]}' | head -12); do
    echo "## thread $tid"
    "$perf" report -i "$data" --stdio --no-children --tid "$tid" --sort dso,sym -g none -q 2>&1 |
      grep -v '^$' | head -"${TOP:-20}"
    # Inclusive: which of our steps (an allocation, a copy's enqueue) holds that time.
    echo "## thread $tid, inclusive (children)"
    "$perf" report -i "$data" --stdio --children --tid "$tid" --sort sym -g none -q 2>&1 |
      grep -v '^$' | head -"${TOP_CHILDREN:-30}"
  done
  echo "## by shared object"
  "$perf" report -i "$data" --stdio --no-children --sort dso -g none -q 2>&1 | grep -v '^$' |
    head -20
  # PERIOD_US: one iteration's time (400mb: the round trip, default 2130 us; recipe: one
  # forward and backward, default 800 us), to give each function's inclusive time per
  # iteration.
  if [[ $part == 400mb ]]; then period=${PERIOD_US:-2130}; else period=${PERIOD_US:-800}; fi
  echo "# inclusive time per iteration ($period us each, $seconds s sampled at $hz Hz)"
  "$perf" script -i "$data" -F tid,ip,sym 2>/dev/null |
    python3 "$(dirname "$0")/inclusive_frames.py" $hz "$(awk -v s="$seconds" -v p="$period" \
      'BEGIN {print s * 1e6 / p}')"
} >"$OUT/$name.txt"
