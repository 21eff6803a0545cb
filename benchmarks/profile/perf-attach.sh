#!/usr/bin/env bash
# Usage: benchmarks/profile/perf-attach.sh NAME SECONDS PATTERN
# Samples the running processes whose command line matches PATTERN (pgrep -f) for
# SECONDS (perf record -g, 4 kHz, every thread) and writes $OUT/NAME.txt like
# perf-record.sh. For a steady phase of a long run (its start-up left out): start
# the run in the background, wait, then attach. (perf record -D does not do this
# for a run's children: those started during the delay are never sampled.)
set -uo pipefail
name=$1 seconds=$2 pattern=$3
source "$(dirname "$0")/perf-env.sh"  # $OUT, $perf, perf_events
# Not this script's own shell nor its subshells: their command lines hold PATTERN too,
# and perf refuses the whole list once one of them has exited.
pids=$(for p in $(pgrep -f -- "$pattern"); do
  cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue  # gone already
  [[ $cmd == *perf-attach.sh* ]] || echo "$p"
done | paste -sd, -)
[[ -n $pids ]] || { echo "perf-attach: no process matches '$pattern'" >&2; exit 1; }
data=/tmp/perf-$name.data
"$perf" record -q -F 4000 -g -p "$pids" -o "$data" -- sleep "$seconds" >"$OUT/$name.out" 2>&1
rc=$?
{
  echo "# $name: pids $pids ($pattern), $seconds s (rc=$rc)"
  echo "## by process and thread name"
  "$perf" report -i "$data" --stdio --no-children --sort pid,comm -g none -q 2>&1 | grep -v '^$' | head -40
  echo "## by shared object"
  "$perf" report -i "$data" --stdio --no-children --sort dso -g none -q 2>&1 | grep -v '^$' | head -30
  echo "## top symbols (self)"
  "$perf" report -i "$data" --stdio --no-children --sort comm,dso,sym -g none -q 2>&1 |
    grep -v '^$' | head -100
} >"$OUT/$name.txt"
exit $rc
