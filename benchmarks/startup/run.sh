#!/usr/bin/env bash
# Usage, on a machine with >= 16 cores, after tests/gpu/run-all.sh build (or with B pointing at a
# CPU build whose worker/ and runner/ hold rpcjob-worker and rpcjob): OUT=DIR benchmarks/startup/run.sh
# 64-worker start-up with and without the job secret (same binary, same launcher), alternating, then
# 24 workers, then 64 in a forced full mesh for comparison (the default above 16 workers is the
# leader barrier: worker/README.md, "Start-up"). One line each (measure.sh): the time `rpcjob run`
# reports (including each worker's 2 s --hold-s, so that the descriptors and memory that start()
# left open are seen) and the largest and median per-worker descriptor and RSS peaks.
set -u
B=${B:-$PWD/build-gpu}
export DEPS=$PWD/.gpudeps/root TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))' 2>/dev/null)
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$TORCH_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export B OUT TIMEOUT=200
here=$(dirname "$0")
echo "soft/hard RLIMIT_NOFILE here: $(ulimit -Sn)/$(ulimit -Hn) (start() raises the soft limit)"
port=30000  # below the ephemeral range (rpcjob run refuses ports in it)
for i in 1 2 3; do
  for v in noauth auth; do
    "$here/measure.sh" $v 64 $port 100m 2
    port=$((port + 200))
  done
done
for v in noauth auth; do
  "$here/measure.sh" $v 24 $port 100m 2
  port=$((port + 200))
done
"$here/measure.sh" noauth 64 $port 100m 2 RPCJOB_START_PIPES=full-mesh
