#!/usr/bin/env bash
# Usage, on a machine with >= 16 cores, after tests/gpu/run-all.sh build (or with B pointing at a
# CPU build whose worker/ and runner/ hold rpcjob-worker and rpcjob): OUT=DIR benchmarks/startup/run.sh
# 64-worker start-up, with and without the job secret (same binary, same launcher), alternating.
set -u
B=${B:-$PWD/build-gpu}
export PATH=$B/worker:$PATH DEPS=$PWD/.gpudeps/root TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$TORCH_DIR/lib
for i in 1 2 3; do
  for v in noauth auth; do
    rm -rf /tmp/su-$v-$i
    s=$(date +%s.%N)
    timeout 200 $B/runner/rpcjob run benchmarks/startup/startup64-$v.yaml --run-dir /tmp/su-$v-$i --first-port $((30000 + i * 200)) > $OUT/su-$v-$i.log 2>&1
    rc=$?
    e=$(date +%s.%N)
    echo "$v run $i rc=$rc wall $(python3 -c "print(round($e-$s,2))") s; $(grep -o 'Succeeded in [0-9.]* s' $OUT/su-$v-$i.log | tail -1); refused: $(grep -c 'handshake' $OUT/su-$v-$i.log)"
  done
done
