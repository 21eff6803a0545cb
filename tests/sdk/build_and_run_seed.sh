#!/bin/bash
# A seed program (examples/model-split, examples/resnet-pipeline) as a user
# builds and runs it: configured and built against the rpcjob that
# install_and_run_hello.sh installed (--prefix; the sdk_install fixture), then run
# with the installed `rpcjob run` on its example manifest, with the program's
# arguments swapped for small sizes (a CPU run of seconds), and its output checked:
#   model-split:     the recipe's "cpu RPC total execution time" line, the
#                    gradients of both layers match the local run, and the
#                    summary's channel bytes (rpcjob::telemetry) hold the 10
#                    activations and 10 gradients each way;
#   resnet-pipeline: "number of splits = N, execution time = T" for every
#                    num_split, after the batches, and every worker exited 0.
set -euo pipefail

while [ $# -gt 0 ]; do
  case "$1" in
    --program) program=$2 ;;
    --prefix) prefix=$2 ;;
    --source) src=$2 ;;
    --work) work=$2 ;;
    --cmake) cmake=$2 ;;
    --generator) generator=$2 ;;
    --cxx) cxx=$2 ;;
    --launcher) launcher=$2 ;;
    --prefix-path) prefix_path=$2 ;;
    *) echo "usage: $0 --program NAME --prefix DIR --source DIR --work DIR --cmake CMAKE ..." >&2
       exit 2 ;;
  esac
  shift 2
done
. "$(dirname "$0")/example_build.sh"
[ -x "$prefix/bin/rpcjob" ] || fail "no installed rpcjob in $prefix (the sdk_install fixture: sdk_hello_test)"

case "$program" in
  model-split)
    # 160x160 floats (100 KiB) are above the runtime's 64 KiB inline limit: the
    # activations and their gradients travel by channel.
    small='[--size, "160", --iterations, "10"]' ;;
  resnet-pipeline)
    # Micro-batches of 1 image still leave BatchNorm 2x2 values per channel in
    # layer4 at 64x64.
    small='[--batch, "8", --image, "64", --batches, "2", --width, "4", --classes, "10", --splits, "1,2,4,8"]' ;;
  *) fail "unknown program $program" ;;
esac

rm -rf "$work"
mkdir -p "$work"

configure_example "$program"
grep -q -F -- "-- rpcjob " "$work/configure.log" || { cat "$work/configure.log"; fail "rpcjob not found"; }

build_example "$program"

# The example's manifest with small sizes: every `args:` line replaced.
manifest=$work/$program.yaml
sed -E "s/^( +args: ).*/\1$small/" "$src/examples/$program.yaml" > "$manifest"
[ "$(grep -c -F -- "args: $small" "$manifest")" -eq "$(grep -c -E '^ +args: ' "$src/examples/$program.yaml")" ] \
  || fail "could not give $program.yaml small sizes"

echo "== rpcjob run $program.yaml (small sizes)"
set +e
PATH="$work/build:$prefix/bin:$PATH" "$prefix/bin/rpcjob" run "$manifest" \
  --run-dir "$work/run" --grace-period 2 > "$work/run.log" 2>&1
rc=$?
set -e
cat "$work/run.log"
[ "$rc" -eq 0 ] || fail "rpcjob run exited $rc"

case "$program" in
  model-split)
    grep -q -E '^\[master\] cpu RPC total execution time: [0-9]+\.[0-9]+ Seconds$' "$work/run.log" \
      || fail "no execution time line"
    grep -q -E '^\[master\] cpu RPC gradients match the local run \(4 tensors, max abs diff [-0-9.e+]+\)$' \
      "$work/run.log" || fail "the gradients were not checked, or differ"
    workers=(master shard) ;;
  resnet-pipeline)
    for batch in 0 1; do
      [ "$(grep -c -F -- "[master] Processing batch $batch" "$work/run.log")" -eq 4 ] \
        || fail "batch $batch not processed once per num_split"
    done
    for split in 1 2 4 8; do
      grep -q -E "^\[master\] number of splits = $split, execution time = [0-9]+\.[0-9]+ \([0-9.]+ images/s\)$" \
        "$work/run.log" || fail "no execution time for num_split $split"
    done
    ! grep -q "unchanged by the optimizer" "$work/run.log" || fail "the optimizer did not step"
    workers=(master shard1 shard2) ;;
esac
for ((i = 0; i < ${#workers[@]}; i++)); do
  grep -q -E "^${workers[$i]} +$i +0 " "$work/run.log" || fail "${workers[$i]} did not exit 0 (summary)"
done
if [ "$program" = model-split ]; then
  # The summary: a worker's first row "NAME RANK EXIT RESTARTS CHANNEL SENT
  # RECEIVED", its other channels on rows below it ("CHANNEL SENT RECEIVED").
  traffic=$(awk '
    function bytes(value, unit) {
      return value * (unit == "KiB" ? 1024 : unit == "MiB" ? 1048576 : unit == "GiB" ? 1073741824 : 1)
    }
    /^WORKER +RANK +EXIT/ { table = 1; next }
    table && $0 ~ /^(master|shard) / {
      worker = $1
      if (NF == 9) { sent[worker] += bytes($6, $7); received[worker] += bytes($8, $9) }
      seen[worker] = 1
      next
    }
    table && $0 ~ /^ +[a-z_]+ / && worker != "" && NF == 5 {
      sent[worker] += bytes($2, $3); received[worker] += bytes($4, $5)
    }
    END { for (w in seen) printf "%s %d %d\n", w, sent[w], received[w] }' "$work/run.log")
  echo "per-worker channel bytes (sent, received):"
  echo "$traffic"
  least=$((10 * 160 * 160 * 4))  # 10 passes of 100 KiB, forward or backward, each way
  for w in master shard; do
    read -r _ sent received < <(grep "^$w " <<< "$traffic") || fail "$w has no row in the summary"
    [ "$sent" -ge "$least" ] || fail "$w sent $sent bytes by channel, expected >= $least"
    [ "$received" -ge "$least" ] || fail "$w received $received bytes by channel, expected >= $least"
  done
fi
echo "PASS: $program"
