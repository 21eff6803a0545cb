#!/usr/bin/env bash
# Usage: benchmarks/profile/perf-record.sh NAME COMMAND [ARGS...]
# Samples COMMAND and its children (perf record -g, 4 kHz, every thread) and writes
# $OUT/NAME.txt: where the CPU time went per process and thread kind, then the top
# symbols. PERF=path/to/perf (default: build-perf/perf from perf-deps.sh, else perf).
set -uo pipefail
name=$1
shift
source "$(dirname "$0")/perf-env.sh"  # $OUT, $perf, perf_events
data=/tmp/perf-$name.data
"$perf" record -q -F 4000 -g -o "$data" -- "$@" >"$OUT/$name.out" 2>&1
rc=$?
{
  echo "# $name: $* (rc=$rc)"
  echo "## by process and thread name"
  "$perf" report -i "$data" --stdio --no-children --sort comm -g none -q 2>/dev/null | grep -v '^$' | head -40
  echo "## by shared object"
  "$perf" report -i "$data" --stdio --no-children --sort dso -g none -q 2>/dev/null | grep -v '^$' | head -30
  echo "## top symbols (self)"
  "$perf" report -i "$data" --stdio --no-children --sort comm,dso,sym -g none -q 2>/dev/null |
    grep -v '^$' | head -80
} >"$OUT/$name.txt"
exit $rc
