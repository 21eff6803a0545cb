#!/bin/sh
# Runs inside the worker image (buildah run): two rpcjob-worker processes exchange
# tensors (small calls and 4 MB tensor echoes; --no-large skips the 400 MB one).
# worker1 serves; master (rank 0, first in RPCJOB_PEERS) runs the built-in bench
# against it. Then rpcjob-bench, which spawns its own pair of workers.
set -eu
# The host network is shared under chroot isolation: pick ports unlikely to be taken.
base=$(( 20000 + $$ % 20000 ))
export RPCJOB_PEERS="master@127.0.0.1:$base,worker1@127.0.0.1:$((base + 1))"
RPCJOB_WORKER_NAME=worker1 timeout 300 rpcjob-worker serve --deadline-s 120 > /tmp/worker1.log 2>&1 &
server=$!
rc=0
RPCJOB_WORKER_NAME=master timeout 300 rpcjob-worker bench --no-large || rc=$?
wait $server || rc=$((rc ? rc : 10))
if [ $rc -ne 0 ]; then
  echo "rpcjob-worker bench: exit $rc; worker1's log:"; cat /tmp/worker1.log; exit $rc
fi
unset RPCJOB_PEERS
echo "--- rpcjob-bench --no-large"
timeout 300 rpcjob-bench --no-large --worker /usr/local/bin/rpcjob-worker
