#!/usr/bin/env bash
# Usage: benchmarks/profile/async-threads.sh DIR [SECONDS]
# Where each thread's time goes during rpcjob-bench's async phase alone (issue 22):
# an `rpcjob-worker bench` pair from DIR with a long async phase
# (RPCJOB_BENCH_ASYNC_ROUNDS=ROUNDS, default 5000, of plain rpcAsync bursts of 2000
# calls; QUICK=0: of 20000, as rpcjob-bench's, with ROUNDS 500 and the small calls
# first), sampled after its start-up (START seconds, default 2) for SECONDS (default 4)
# on cycles where the machine counts them (else cpu-clock), and
# $OUT/async-threads.txt: per thread its futex calls, yields and context switches
# (1 s), its share of the samples and its top symbols. A thread whose share equals a
# spinning thread's and that hardly yields is the one that bounds the rate.
set -uo pipefail
d=$1 seconds=${2:-4}
source "$(dirname "$0")/perf-env.sh"  # $OUT, $perf, perf_events
p0=$((20000 + RANDOM % 20000))
peers="bench0@127.0.0.1:$p0,bench1@127.0.0.1:$((p0 + 1))"
RPCJOB_PEERS=$peers RPCJOB_WORKER_NAME=bench1 "$d/rpcjob-worker" serve --deadline-s 120 \
  >/dev/null 2>"$OUT/async-threads.server.err" &
server=$!
quick=(--quick)
rounds=${ROUNDS:-5000}
if [[ ${QUICK:-1} == 0 ]]; then
  quick=()
  rounds=${ROUNDS:-500}
fi
RPCJOB_PEERS=$peers RPCJOB_WORKER_NAME=bench0 RPCJOB_BENCH_ASYNC_ROUNDS=$rounds \
  RPCJOB_BENCH_ASYNC_PLAIN=1 "$d/rpcjob-worker" bench --json --channels auto --no-large \
  "${quick[@]}" >"$OUT/async-threads.json" 2>"$OUT/async-threads.err" &
caller=$!
sleep "${START:-2}"  # start-up and the small calls are over by then
events=$(perf_events)
data=/tmp/perf-async-threads.data
# Per thread: how often it slept or woke another (futex), yielded, was switched out.
"$perf" stat -e syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield,context-switches \
  --per-thread -p "$server,$caller" -o /tmp/async-threads.stat -- sleep 1 >/dev/null 2>&1
"$perf" record -q -F 2000 -e "$events" -g -p "$server,$caller" -o "$data" -- sleep "$seconds" \
  >/dev/null 2>&1
wait $caller
wait $server
{
  echo "# async phase, $seconds s of pids $caller (caller) $server (server), events $events"
  grep -o '"async_calls_per_s":[^,]*' "$OUT/async-threads.json"
  echo "## per thread, 1 s: futex calls, yields, context switches"
  grep -E 'futex|yield|switches' /tmp/async-threads.stat | sort -k2 -n -r | awk '$2 > 100' | head -20
  "$perf" report -i "$data" --stdio --no-children --sort pid -g none -q 2>&1 | grep -v '^$' |
    head -40
  for tid in $("$perf" report -i "$data" --stdio --no-children --sort pid -g none -q 2>/dev/null |
    awk '$1+0 >= 2 {split($2, a, ":"); print a[1]}' | head -8); do
    echo "## thread $tid"
    "$perf" report -i "$data" --stdio --no-children --tid "$tid" --sort sym -g none -q 2>&1 |
      grep -v '^$' | head -${TOP:-25}
  done
} >"$OUT/async-threads.txt"
