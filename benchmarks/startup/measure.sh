#!/usr/bin/env bash
# One start-up measurement: `rpcjob run` of N `rpcjob-worker serve` workers (the startup64 manifests
# with N replicas and CPU request CPU), then the largest count of open file descriptors and the
# largest resident set of any worker while the job runs (workers hold HOLD s after start(), so the
# peak is what start() left open).
#   B=BUILD_DIR benchmarks/startup/measure.sh noauth|auth N FIRST_PORT [CPU=30m] [HOLD=4] [ENV...]
# Prints one line: variant, workers, rc, wall seconds, "Succeeded in" seconds (HOLD included), and
# over the worker processes the largest and the median of each one's peak descriptors and RSS (MiB).
# ENV: NAME=VALUE pairs exported to the workers (e.g. RPCJOB_START_PIPES=full-mesh). With OUT set,
# the runner's log is copied there. B's runner/rpcjob and worker/rpcjob-worker are used.
set -u
variant=$1 n=$2 port=$3 cpu=${4:-30m} hold=${5:-4}
shift 5 2>/dev/null || shift $#
B=${B:-$PWD/build}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/startup-XXXXXX)
for kv in "$@"; do export "$kv"; done
sed -e "s/replicas: 64/replicas: $n/" -e "s/cpu: 100m/cpu: $cpu/" \
  -e "s/rpcjob-worker serve/rpcjob-worker serve --hold-s $hold/" \
  "$here/startup64-$variant.yaml" > "$tmp/job.yaml"
s=$(date +%s.%N)
PATH=$B/worker:$PATH timeout ${TIMEOUT:-300} "$B/runner/rpcjob" run "$tmp/job.yaml" --run-dir "$tmp/run" \
  --first-port "$port" > "$tmp/log" 2>&1 &
runner=$!
declare -A fds rss  # per worker process: the largest seen
descendants() {  # the runner's process tree, breadth first
  local todo=$1 p
  while [ -n "$todo" ]; do
    set -- $todo; todo=
    for p; do echo "$p"; todo="$todo $(cat /proc/"$p"/task/*/children 2>/dev/null)"; done
    todo=$(echo $todo)
  done
}
while kill -0 $runner 2>/dev/null; do
  for p in $(descendants $runner); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = rpcjob-worker ] || continue
    f=$(ls /proc/$p/fd 2>/dev/null | wc -l)
    r=$(awk '/VmRSS/{print $2}' /proc/$p/status 2>/dev/null)
    [ "$f" -gt "${fds[$p]:-0}" ] && fds[$p]=$f
    [ -n "$r" ] && [ "$r" -gt "${rss[$p]:-0}" ] && rss[$p]=$r
  done
  sleep 0.2
done
wait $runner
rc=$?
e=$(date +%s.%N)
ok=$(grep -o 'Succeeded in [0-9.]* s' "$tmp/log" | tail -1)
[ -n "${OUT:-}" ] && cp "$tmp/log" "$OUT/startup-$variant-$n-$port.log"
stats() {  # max and median of the values on stdin
  sort -n | awk '{v[NR]=$1} END {if (NR) printf "max %d median %d", v[NR], v[int((NR+1)/2)]; else printf "none"}'
}
echo "$variant n=$n rc=$rc wall $(python3 -c "print(round($e-$s,1))") s; ${ok:-no success}; \
fds/worker $(printf '%s\n' "${fds[@]}" | stats); \
RSS MiB/worker $(for r in "${rss[@]}"; do echo $((r / 1024)); done | stats); log $tmp/log"
