#!/bin/sh
# Runs inside the worker image (buildah run): two rpcjob-worker processes exchange
# tensors. worker1 serves; master runs the built-in bench against it. Peers and
# identity come from RPCJOB_PEERS / RPCJOB_WORKER_NAME (worker/README.md).
set -eu
# The host network is shared under chroot isolation: pick ports unlikely to be taken.
base=$(( 20000 + $$ % 20000 ))
export RPCJOB_PEERS="master@127.0.0.1:$base,worker1@127.0.0.1:$((base + 1))"
RPCJOB_WORKER_NAME=worker1 rpcjob-worker serve > /tmp/worker1.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
rc=0
RPCJOB_WORKER_NAME=master timeout 120 rpcjob-worker bench || rc=$?
if [ $rc -ne 0 ]; then
  echo "master exited $rc; worker1's log:"; cat /tmp/worker1.log
fi
exit $rc
