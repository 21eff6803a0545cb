#!/usr/bin/env bash
# One call on the GPU machine: configure and build the `gpu` preset (-j32), run the
# GPU tests, instrument_test and metrics_test, a 2-worker CUDA transfer between live
# rpcjob-workers whose /metrics is fetched with curl (CUDA channel bytes and event-timed
# durations), the channel matrix of every GPU pair (topology, 2 GPUs or more), two workers run by rpcjob-launch as in a pod (pod: CUDA_VISIBLE_DEVICES as
# the device plugin sets it, the channel must be cuda_ipc/cuda_nvlink, the bytes exact),
# the seed programs (seeds), the GPU benchmark (ours beside PyTorch's RPC, same run) and
# the CPU rpcjob-bench --json.
# Usage, from the repository root, with .gpudeps carried (made by
# EXTRA="libtensorpipe-dev libnop-dev" ../shared/tools/gpu-deps.sh):
#   tests/gpu/run-all.sh [build|test|e2e|topology|pod|seeds|bench|all|metrics|trace|profile|rt400|placement]...
# (seeds: the seed programs examples/model-split and examples/resnet-pipeline built
#  against an install of this build and run on their CUDA manifests with `rpcjob
#  run`, then the pipeline tutorial's own PyTorch program: $OUT/seeds_table.md)
# (trace: the small and 400 MB CUDA round trips and the recipe's iterations traced
#  step by step, after a build; not part of all: $OUT/trace-*.txt)
# (metrics: the metrics overhead per recorder, after a build; not part of all;
#  ROUNDS, SLICE and RECORDERS, a list of --recorders values, change it)
# Logs go to gpu-logs/ and, packed, to $OUT/logs.tgz (the device tool brings back
# at most 8 files); $OUT/summary.txt and $OUT/table.md beside it.
# Any number of GPUs: the summary says how many the machine has and, per test, which
# devices it used (one GPU: the two processes of a pair share cuda:0) or why it
# was skipped. CPU_BENCH=0 leaves out the CPU rpcjob-bench of `bench`; CPU_BENCH_RUNS=N
# runs it N times (fresh processes each).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
L=$PWD/gpu-logs
mkdir -p "$OUT" "$L"
export NCCL_NVLS_ENABLE=0
DEPS=$PWD/.gpudeps/root
# Apart from the export: a python3 without torch stops here, saying so, not later.
TORCH_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))') ||
  { echo "FATAL: python3 cannot import torch (the GPU machine's PyTorch)" | tee "$OUT/summary.txt" >&2; exit 1; }
export DEPS TORCH_DIR
export CMAKE_PREFIX_PATH=$DEPS/usr:$DEPS/usr/lib/x86_64-linux-gnu/cmake:$TORCH_DIR/share/cmake
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$TORCH_DIR/lib:${LD_LIBRARY_PATH:-}
# Several stages in one call run in the script's order (build test e2e topology seeds pod bench).
stages=" ${*:-all} "
want() { [[ $stages == *" all "* || $stages == *" $1 "* ]]; }
B=build-gpu
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
W=$((GPUS > 1 ? 1 : 0))  # the second worker's GPU: cuda:1, or cuda:0 shared
S=$OUT/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
say "this machine: $GPUS GPU(s)"
pack() { tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null; }
trap pack EXIT

# Only Debian's TensorPipe *headers* are wanted (the interface headers libtorch lacks);
# its library and CMake targets would shadow the TensorPipe inside libtorch.
rm -rf "$DEPS/usr/share/cmake/Tensorpipe" "$DEPS"/usr/lib/x86_64-linux-gnu/libtensorpipe.so*
# Debian's headers in a folder of their own (why: tests/gpu/tensorpipe-include.sh).
TP=$(tests/gpu/tensorpipe-include.sh) || { say "FATAL: no TensorPipe interface headers"; exit 1; }

if want build; then
  T0=$SECONDS
  # Which TensorPipe headers both ship, and whether they are identical.
  (cd "$TP" && find tensorpipe -name '*.h' | sort) | while read -r f; do
    if [[ -f $TORCH_DIR/include/$f ]]; then
      cmp -s "$TP/$f" "$TORCH_DIR/include/$f" && echo "same $f" || echo "DIFF $f"
    else
      echo "debian-only $f"
    fi
  done >"$L/tp_headers.txt"
  say "TensorPipe headers, Debian vs libtorch: $(grep -c '^same' "$L/tp_headers.txt") identical," \
    "$(grep -c '^DIFF' "$L/tp_headers.txt") differ, $(grep -c '^debian-only' "$L/tp_headers.txt") Debian only"
  # Differences in code, not in comments or whitespace (the licence line changed
  # from Facebook to Meta upstream) nor in the TORCH_STABLE_ONLY guard libtorch wraps
  # around every header it installs: guard dropped, preprocessed without includes,
  # blanks dropped.
  code() {
    sed -e '/^#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)/d' \
      -e '/^#endif *\/\/ !defined(TORCH_STABLE_ONLY)/d' \
      -e '/^#else$/{N;/\n#error "This file should not be included when either TORCH_STABLE_ONLY/d}' "$1" |
      g++ -fpreprocessed -dD -E -P -x c++ - 2>/dev/null | tr -d ' \t\n'
  }
  grep '^DIFF' "$L/tp_headers.txt" | cut -d' ' -f2 | while read -r f; do
    if [[ $(code "$TP/$f") == "$(code "$TORCH_DIR/include/$f")" ]]; then
      echo "comments-only $f"
    else
      echo "CODE-DIFF $f"
      diff -u "$TP/$f" "$TORCH_DIR/include/$f" >>"$L/tp_headers.diff"
    fi
  done >"$L/tp_headers_code.txt"
  say "  of those differing: $(grep -c '^comments-only' "$L/tp_headers_code.txt") only in comments/whitespace," \
    "$(grep -c '^CODE-DIFF' "$L/tp_headers_code.txt") in code:"
  grep '^CODE-DIFF' "$L/tp_headers_code.txt" | tee -a "$S"
  head -c 6000 "$L/tp_headers.diff" 2>/dev/null
  (cmake --preset gpu -DRPCJOB_BUILD_OPERATOR=OFF -DTensorpipe_INCLUDE_DIR=$TORCH_DIR/include \
    -DRPCJOB_TENSORPIPE_EXTRA_INCLUDE_DIR=$TP >"$L/configure.log" 2>&1 &&
    cmake --build $B -j32 --target rpcjob_gpu_test rpcjob_gpu_autograd_test rpcjob-gpu-bench rpcjob-same-gpu-floor rpcjob-nvlink-floor rpcjob-recipe-floor \
      rpcjob-bench rpcjob-autograd-bench rpcjob-worker rpcjob rpcjob-launch >"$L/build.log" 2>&1) ||
    { grep -B5 -A25 -m3 "error" "$L/build.log" | head -120; tail -30 "$L/configure.log"; exit 1; }
  say "build ok ($((SECONDS - T0)) s)"
  cmake --build $B -j32 --target instrument_test metrics_test local_engine_test autograd_context_test >"$L/build_tests.log" 2>&1 ||
    { say "instrument_test/metrics_test/local_engine_test/autograd_context_test build FAILED"; grep -m3 -B2 -A12 "error" "$L/build_tests.log" | head -50; }
  # The Debian headers the build actually read (they must be interface headers only).
  find $B -name '*.d' -print0 | xargs -0 cat 2>/dev/null | tr ' ' '\n' |
    grep -o '\.gpudeps/tensorpipe-include/\(tensorpipe\|nop\)/[^ ]*' | sort -u >"$L/debian_headers_used.txt"
  say "Debian TensorPipe/libnop headers read by the build: $(wc -l <"$L/debian_headers_used.txt")" \
    "($(grep -c tensorpipe/ "$L/debian_headers_used.txt") tensorpipe, see gpu-logs/debian_headers_used.txt)"
fi

if want test; then
  timeout 200 $B/tests/gpu/rpcjob_gpu_test --gtest_output=xml:"$L/gpu_test.xml" >"$L/gpu_test.log" 2>&1
  say "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "$L/gpu_test.log" | tr '\n' ' ')"
  # Which devices each test used, and why any was skipped.
  grep -E "^\[ devices  \]" "$L/gpu_test.log" | sed 's/^\[ devices  \] /  ran: /' | tee -a "$S"
  grep -B3 -E "^\[  SKIPPED \] [A-Z]" "$L/gpu_test.log" | grep -E "Skipped|needs" |
    sed 's/^/  skipped: /' | tee -a "$S"
  grep -E "^\[ *(FAILED|SKIPPED) " "$L/gpu_test.log" | tee -a "$S"
  grep -B2 -A6 "Failure" "$L/gpu_test.log" | head -40
  timeout 200 $B/tests/gpu/rpcjob_gpu_autograd_test >"$L/gpu_autograd_test.log" 2>&1
  say "gpu autograd tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/gpu_autograd_test.log" | tr '\n' ' ')"
  grep -B2 -A6 "Failure" "$L/gpu_autograd_test.log" | head -40
  # local_engine_test, autograd_context_test: their CUDA cases (streams) run only here.
  for t in instrument_test metrics_test local_engine_test autograd_context_test; do
    bin=$(find $B/tests -name $t -type f | head -1)
    timeout 120 "$bin" >"$L/$t.log" 2>&1
    say "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/$t.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Z]" "$L/$t.log" | tee -a "$S"
    grep -B2 -A8 "Failure" "$L/$t.log" | head -30
  done
fi

if want e2e; then
  # The plan rpcjob run makes here, with the GPU topology NVML reports.
  $B/runner/rpcjob plan examples/model-split-one-gpu.yaml --local >"$L/plan_local.txt" 2>&1
  say "rpcjob plan --local rc=$?: $(grep -m1 'GPU topology' "$L/plan_local.txt")"
  # The seed programs' examples (model-split*, resnet-pipeline*) run in `seeds`.

  # Two live workers, a CUDA transfer cuda:0 -> cuda:$W by the device map, /metrics by curl.
  A=$L/live-assignment.yaml
  cat >"$A" <<YAML
apiVersion: rpcjob.dev/v1alpha1
kind: Assignment
job: {name: gpu-metrics, namespace: default}
workers:
  - {name: w0, rank: 0, group: w, address: "127.0.0.1:29611", metricsPort: 29621, node: local,
     gpus: [0], deviceMaps: {w1: {"cuda:0": "cuda:$W"}}}
  - {name: w1, rank: 1, group: w, address: "127.0.0.1:29612", metricsPort: 29622, node: local,
     gpus: [$W], deviceMaps: {w0: {"cuda:$W": "cuda:0"}}}
YAML
  W=$B/worker/rpcjob-worker
  RPCJOB_ASSIGNMENT=$A RPCJOB_WORKER_NAME=w1 timeout 90 $W send >"$L/live_w1.log" 2>&1 &
  p1=$!
  RPCJOB_ASSIGNMENT=$A RPCJOB_WORKER_NAME=w0 timeout 90 $W send --bytes 4194304 --count 20 \
    --device cuda:0 --hold-s 6 >"$L/live_w0.log" 2>&1 &
  p0=$!
  for _ in $(seq 300); do grep -q "^sent" "$L/live_w0.log" 2>/dev/null && break; sleep 0.2; done
  sleep 1  # the event poller reports within microseconds; a margin all the same
  fetch() {
    if command -v curl >/dev/null; then
      curl -s --max-time 5 "$1"
    else  # no curl on the machine: the same GET from Python
      python3 -c 'import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1],timeout=5).read().decode(),end="")' "$1"
    fi
  }
  fetch http://127.0.0.1:29621/metrics >"$L/metrics_w0.txt"
  fetch http://127.0.0.1:29622/metrics >"$L/metrics_w1.txt"
  wait $p0; r0=$?
  wait $p1; r1=$?
  say "live CUDA transfer: w0 rc=$r0, w1 rc=$r1; $(grep -m1 '^sent' "$L/live_w0.log")"
  python3 - "$L/metrics_w0.txt" "$L/metrics_w1.txt" <<'PY' 2>&1 | tee -a "$S"
import re, sys
ok = True
for path, direction in zip(sys.argv[1:], ("send", "recv")):
    text = open(path).read()
    def total(metric):
        s = 0.0
        for m in re.finditer(r'^' + metric + r'\{([^}]*)\} (\S+)$', text, re.M):
            if re.search(r'channel="cuda_[a-z]+"', m.group(1)) and f'direction="{direction}"' in m.group(1):
                s += float(m.group(2))
        return s
    b = total("rpcjob_channel_bytes_total")
    n = total("rpcjob_channel_transfer_duration_seconds_count")
    t = total("rpcjob_channel_transfer_duration_seconds_sum")
    chans = sorted(set(re.findall(r'rpcjob_channel_bytes_total\{[^}]*channel="(cuda_[a-z]+)"', text)))
    good = b > 0 and n > 0
    ok &= good
    print(f"  {path.split('/')[-1]} ({direction}): CUDA channels {chans}, bytes {b:.0f}, "
          f"event-timed transfers {n:.0f}, mean {1e6 * t / n if n else 0:.1f} us -> {'OK' if good else 'FAIL'}")
print("live /metrics check:", "OK" if ok else "FAIL")
PY
fi

if want topology; then
  # Every GPU a worker, every worker sending 5 x 4 MiB from its GPU to every other
  # (examples/channel-matrix.yaml, replicas set to the machine's GPU count), run by
  # `rpcjob run` with the placement it plans from NVML's topology: the plan (which
  # rank on which GPU), nvidia-smi's own matrix beside it, and the channel each
  # ordered pair used, read from the workers' metrics files (channel_matrix.py:
  # every pair must have gone by cuda_nvlink or cuda_ipc). Needs 2 GPUs or more.
  if ((GPUS < 2)); then
    say "topology: not run (needs 2 GPUs or more, this machine has $GPUS)"
  else
    T=$L/topology
    rm -rf "$T"
    mkdir -p "$T"
    nvidia-smi topo -m >"$T/nvidia-smi-topo.txt" 2>&1
    sed "s/^      replicas: 2\$/      replicas: $GPUS/" examples/channel-matrix.yaml >"$T/job.yaml"
    $B/runner/rpcjob plan "$T/job.yaml" --local >"$T/plan.txt" 2>&1
    say "topology: rpcjob plan --local rc=$?"
    grep -E "^(# GPU topology|note:)" "$T/plan.txt" | tee -a "$S"
    sed -n '/^RANK/,/^$/p' "$T/plan.txt" | tee -a "$S"
    PATH=$PWD/$B/worker:$PATH timeout 180 $B/runner/rpcjob run "$T/job.yaml" --run-dir "$T/run" \
      --first-port 29700 >"$T/run.log" 2>&1
    rc=$?
    say "topology: rpcjob run of $GPUS workers rc=$rc, $(grep -c 'values exact: yes' "$T/run.log")" \
      "of $((GPUS * (GPUS - 1))) sends exact"
    ((rc == 0)) || tail -20 "$T/run.log"
    { echo "nvidia-smi topo -m:"; echo '```'; cat "$T/nvidia-smi-topo.txt"; echo '```'; echo
      echo "Channel per ordered pair (rows send, columns receive; bytes by channel):"; echo
      python3 benchmarks/gpu/channel_matrix.py "$T/run" --require cuda_nvlink,cuda_ipc,cuda_lane
      echo "channel_matrix rc=$?"; } >"$OUT/channel_matrix.md" 2>&1
    sed -n '/^| from/,$p' "$OUT/channel_matrix.md" | tee -a "$S"
  fi
fi

if want seeds; then
  # As a user builds them (examples/*/README.md): install this build, build each
  # program against the install with find_package(rpcjob), run its manifests.
  T0=$SECONDS
  P=$PWD/$B/sdk-prefix
  rm -rf "$P"
  cmake --install $B --prefix "$P" >"$L/seeds_install.log" 2>&1 || say "seeds: cmake --install FAILED"
  for prog in model-split resnet-pipeline; do
    (cmake -S examples/$prog -B $B/seeds/$prog -G Ninja -DCMAKE_BUILD_TYPE=Release \
      "-DCMAKE_PREFIX_PATH=$P;${CMAKE_PREFIX_PATH//:/;}" &&
      cmake --build $B/seeds/$prog -j32) >"$L/seeds_build_$prog.log" 2>&1 ||
      { say "seeds: build of examples/$prog FAILED"; grep -m3 -B2 -A12 "error" "$L/seeds_build_$prog.log" | head -50; }
  done
  say "seeds: install and build ($((SECONDS - T0)) s)"
  examples="model-split-one-gpu resnet-pipeline-one-gpu"
  ((GPUS > 1)) && examples="$examples model-split-cuda resnet-pipeline-cuda"
  port=29900
  for ex in $examples; do
    PATH=$PWD/$B/seeds/model-split:$PWD/$B/seeds/resnet-pipeline:$P/bin:$PATH \
      timeout 600 "$P/bin/rpcjob" run examples/$ex.yaml --run-dir "$L/run-$ex" --first-port $port \
      >"$L/$ex.log" 2>&1
    rc=$?
    port=$((port + 20))
    say "rpcjob run examples/$ex.yaml rc=$rc"
    grep -E "RPC total execution time|RPC gradients|cuda RPC skipped|number of splits|ResNet50 pipeline:|Succeeded|Failed|Unschedulable|share" \
      "$L/$ex.log" | head -14 | tee -a "$S"
    [[ $rc == 0 ]] || tail -30 "$L/$ex.log"
  done
  ((GPUS > 1)) || say "not run: examples/model-split-cuda.yaml, resnet-pipeline-cuda.yaml (need 2 GPUs, this machine has $GPUS)"
  # The pipeline as the tutorial runs it: fresh processes (a job) per num_split, so
  # that each pays the first iteration's warm-up as PyTorch's do (seeds_table.py).
  ex=resnet-pipeline-one-gpu
  ((GPUS > 1)) && ex=resnet-pipeline-cuda
  fresh=$L/resnet-pipeline-fresh.log
  : >"$fresh"
  for n in 1 2 4 8; do
    sed "s/\"1,2,4,8\"/\"$n\"/; s/name: $ex\$/name: $ex-s$n/" examples/$ex.yaml >"$L/$ex-s$n.yaml"
    # The tutorial's own figure is mp.spawn to join (process start, init_rpc, the
    # model, the batches, shutdown): ours the same way is `rpcjob run` launch to exit.
    t0=$EPOCHREALTIME
    RPCJOB_EXAMPLE_PHASES=1 PATH=$PWD/$B/seeds/resnet-pipeline:$P/bin:$PATH \
      timeout 300 "$P/bin/rpcjob" run "$L/$ex-s$n.yaml" --run-dir "$L/run-$ex-s$n" --first-port $port \
      >>"$fresh" 2>&1 || say "fresh job for num_split $n FAILED (rc=$?)"
    echo "job wall time: number of splits = $n, launch to exit = $(awk "BEGIN{print $EPOCHREALTIME - $t0}") s" >>"$fresh"
    port=$((port + 20))
  done
  # The tutorial's own program, the same sizes, on the same GPUs.
  RPCJOB_EXAMPLE_PHASES=1 PYTHONUNBUFFERED=1 timeout 900 python3 benchmarks/gpu/resnet_pipeline_torch.py 29990 \
    >"$L/resnet_pipeline_torch.log" 2>&1
  say "PyTorch pipeline tutorial rc=$?"
  grep -E "^number of splits" "$L/resnet_pipeline_torch.log" | tee -a "$S"
  # Where each num_split's time went (RPCJOB_EXAMPLE_PHASES): ours fresh, then PyTorch's.
  { echo "phases, ours (a job per num_split):"; grep -ho "phases .*" "$fresh"
    echo "phases, PyTorch's tutorial:"; grep -ho "phases .*" "$L/resnet_pipeline_torch.log"; } |
    tee "$L/phases.txt" | tee -a "$S"
  ours=$L/resnet-pipeline-one-gpu.log
  ((GPUS > 1)) && ours=$L/resnet-pipeline-cuda.log
  python3 benchmarks/gpu/seeds_table.py "$ours" "$L/resnet_pipeline_torch.log" --fresh "$fresh" \
    "$L"/model-split-*.log | tee "$OUT/seeds_table.md"
fi

if want pod; then
  # Two workers of one pod, run the way the pod runs them (operator/README.md, "Pods"):
  # one container that sees the pod's GPUs through CUDA_VISIBLE_DEVICES, renumbered
  # from cuda:0, and rpcjob-launch starting both workers from a launch spec, with the
  # assignment the planner makes for Kubernetes (pod-local GPU indices; the Service
  # names replaced by loopback). One GPU: examples/model-split-one-gpu.yaml's layout
  # (both workers share it); two or more: model-split-cuda's on the machine's last two
  # GPUs in reverse order, so the pod's cuda:0 is not the machine's. Checks: both runs
  # exit 0, the 64 MiB tensors arrive exactly, the bytes went by cuda_ipc, cuda_nvlink or
  # cuda_lane and none by cuda_basic, and the model split's gradients match (the
  # seed program examples/model-split, built by `seeds`).
  # POD_DEVICE=cpu runs the same on a machine without GPUs (the CUDA checks skipped).
  P=$L/pod
  rm -rf "$P"
  mkdir -p "$P"
  dev=${POD_DEVICE:-cuda:0}
  if ((GPUS > 1)); then
    ex=model-split-cuda vis="$((GPUS - 1)),$((GPUS - 2))" podGpus=2
  else
    ex=model-split-one-gpu vis=0 podGpus=1
  fi
  printf 'nodes:\n  - {name: gpu-node, gpus: %d, nvlink: true}\n' "$((GPUS > 0 ? GPUS : 1))" >"$P/nodes.yaml"
  $B/runner/rpcjob plan examples/$ex.yaml --nodes "$P/nodes.yaml" --output yaml >"$P/plan.yaml" 2>&1 ||
    { say "pod: rpcjob plan FAILED"; cat "$P/plan.yaml"; }
  grep -q "gpus: $podGpus\$" "$P/plan.yaml" || say "pod: FAIL the plan's pod does not ask for $podGpus GPU(s)"
  sed -n '/^assignment:/,/^pairs:/p' "$P/plan.yaml" | sed '1d;$d;s/^  //' |
    sed -E 's/address: [^,]*:295([0-9][0-9])/address: "127.0.0.1:298\1"/' >"$P/assignment.yaml"
  worker() {  # name rank program args...: one worker of the launch spec (JSON)
    local name=$1 rank=$2 argv="" a
    shift 2
    for a in "$@"; do argv="$argv${argv:+,}\"$a\""; done
    printf '{"name":"%s","argv":[%s],"env":[{"name":"RPCJOB_WORKER_NAME","value":"%s"},{"name":"RPCJOB_RANK","value":"%s"},{"name":"RPCJOB_WORLD_SIZE","value":"2"},{"name":"RPCJOB_ASSIGNMENT","value":"%s"},{"name":"RPCJOB_METRICS_PORT","value":"0"},{"name":"RPCJOB_METRICS_FILE","value":"%s"}]}' \
      "$name" "$argv" "$name" "$rank" "$P/assignment.yaml" "$P/$run-$name.metrics"
  }
  pod_ok=1
  runs="send split"
  [[ $dev == cpu ]] && runs=send  # the model split takes the assignment's GPUs
  [[ -x $B/seeds/model-split/rpcjob-model-split ]] ||
    { [[ $runs == send ]] || say "pod: no $B/seeds/model-split/rpcjob-model-split (run seeds first): split not run"; runs=send; }
  for run in $runs; do
    if [[ $run == send ]]; then
      m=$(worker master 0 rpcjob-worker send --bytes 67108864 --count 10 --device $dev --verify)
      s=$(worker shard 1 rpcjob-worker send)
    else
      m=$(worker master 0 rpcjob-model-split --mode cuda)
      s=$(worker shard 1 rpcjob-model-split --mode cuda)
    fi
    echo "{\"workers\":[$m,$s]}" >"$P/$run.json"
    CUDA_VISIBLE_DEVICES=$vis PATH=$PWD/$B/worker:$PWD/$B/seeds/model-split:$PATH \
      timeout 120 $B/runner/rpcjob-launch \
      --spec "$P/$run.json" --report "$P/$run-report.json" >"$P/$run.log" 2>&1
    rc=$?
    ((rc == 0)) || pod_ok=0
    say "pod ($ex, CUDA_VISIBLE_DEVICES=$vis): rpcjob-launch $run rc=$rc;" \
      "$(grep -hE 'values exact|RPC gradients' "$P/$run.log" | sed 's/^\[master\] //' | tail -1)"
    [[ $rc == 0 ]] || tail -20 "$P/$run.log"
    cat "$P/$run-report.json" >>"$P/reports.txt" 2>/dev/null
  done
  grep -q "values exact: yes" "$P/send.log" || pod_ok=0
  [[ $runs == send ]] || grep -q "cuda RPC gradients match the local run" "$P/split.log" || pod_ok=0
  python3 - "$P/send-master.metrics" "$dev" <<'PY' 2>&1 | tee -a "$S"
import re, sys
path, dev = sys.argv[1], sys.argv[2]
try:
    text = open(path).read()
except OSError as e:
    print(f"  pod channels: FAIL no metrics file ({e})"); sys.exit(1)
by = {}
for m in re.finditer(r'^rpcjob_channel_bytes_total\{([^}]*)\} (\S+)$', text, re.M):
    if 'direction="send"' in m.group(1):
        ch = re.search(r'channel="([^"]+)"', m.group(1)).group(1)
        by[ch] = by.get(ch, 0) + float(m.group(2))
print("  pod channels (master sends, bytes):", {k: int(v) for k, v in sorted(by.items())})
if dev.startswith("cuda"):
    fast = by.get("cuda_ipc", 0) + by.get("cuda_nvlink", 0) + by.get("cuda_lane", 0)
    good = fast >= 10 * 67108864 and by.get("cuda_basic", 0) == 0
    print("  pod channel check (cuda_ipc/cuda_nvlink/cuda_lane, no cuda_basic):", "OK" if good else "FAIL")
    sys.exit(0 if good else 1)
PY
  ((${PIPESTATUS[0]} == 0)) || pod_ok=0
  say "pod check: $([[ $pod_ok == 1 ]] && echo OK || echo FAIL)"
fi

if want bench; then
  R=$L/bench.jsonl
  : >"$R"
  for ch in "" "cuda_ipc,basic"; do
    RPCJOB_GPU_CHANNELS=$ch timeout 100 $B/tests/gpu/rpcjob-gpu-bench >>"$R" 2>>"$L/bench.err"
  done
  # cuda_nvlink with the former test of a shared GPU (the pointer's device ordinal,
  # which took every cross-GPU pair for one): the A/B of nvlink_descriptor.h's fix.
  if ((GPUS > 1)); then
    RPCJOB_NVLINK_SAME_GPU_BY=pointer timeout 100 $B/tests/gpu/rpcjob-gpu-bench 2>>"$L/bench.err" |
      sed 's/"impl": "rpcjob"/"impl": "rpcjob, RPCJOB_NVLINK_SAME_GPU_BY=pointer"/' >>"$R"
  fi
  PYTHONUNBUFFERED=1 timeout 150 python3 benchmarks/gpu/torch_rpc_bench.py 29517 2>>"$L/bench.err" | grep '^{' >>"$R"
  # PyTorch's recipe again with the intra-op environment rpcjob gives each of its
  # two workers here (rpcjob-gpu-bench's intra_op_threads): the CPU mode depends on it.
  n=$(( $(nproc) / 2 )); ((n > 0)) || n=1
  OMP_NUM_THREADS=$n OMP_WAIT_POLICY=PASSIVE RPCJOB_BENCH_ONLY=recipe PYTHONUNBUFFERED=1 timeout 150 \
    python3 benchmarks/gpu/torch_rpc_bench.py 29519 2>>"$L/bench.err" | grep '^{' |
    sed "s/\"impl\": \"pytorch\"/\"impl\": \"pytorch, recipe only, OMP_NUM_THREADS=$n, passive\"/" >>"$R"
  # The bound under the shared GPU's round trips: a hand-off between two processes
  # on one GPU with nothing but the CUDA runtime (same_gpu_floor.cc).
  timeout 120 $B/tests/gpu/rpcjob-same-gpu-floor | tee "$L/same_gpu_floor.txt" | tee -a "$S"
  # The recipe's own GPU work in two processes, no RPC (recipe_floor.cc): the least
  # time its CUDA mode can take here; table.py prints it under the recipe's figures.
  timeout 200 $B/tests/gpu/rpcjob-recipe-floor 2>>"$L/bench.err" | tee -a "$R" "$S"
  rc=${PIPESTATUS[0]}
  ((rc == 0)) || say "recipe floor FAILED (rc=$rc): $(grep -m1 'rpcjob-recipe-floor:' "$L/bench.err")"
  # One worker's backward pass (the recipe shard's) on the calling thread beside
  # libtorch's engine, which hands CUDA nodes to its device thread (issue 15).
  timeout 120 $B/worker/rpcjob-autograd-bench --device cuda | tee "$L/autograd_bench.txt" | tee -a "$S"
  # CPU_BENCH_RUNS=N: N fresh rpcjob-bench runs (issue 22 asks for three); the table shows
  # the first, the summary each one's line.
  if [[ ${CPU_BENCH:-1} != 0 ]]; then
    for k in $(seq "${CPU_BENCH_RUNS:-1}"); do
      timeout 120 $B/worker/rpcjob-bench --json >"$L/cpu_bench-$k.json" 2>>"$L/bench.err"
      echo "cpu rpcjob-bench run $k: $(cat "$L/cpu_bench-$k.json")" >>"$S"
    done
    # The same without the shared-memory lane (small messages through TensorPipe).
    RPCJOB_LANE=0 timeout 120 $B/worker/rpcjob-bench --json >"$L/cpu_bench-nolane.json" 2>>"$L/bench.err"
    echo "cpu rpcjob-bench, lane off (RPCJOB_LANE=0): $(cat "$L/cpu_bench-nolane.json")" >>"$S"
    cp "$L/cpu_bench-1.json" "$L/cpu_bench.json"
  fi
  python3 benchmarks/gpu/table.py "$R" "$L/cpu_bench.json" | tee "$OUT/table.md"
  tail -8 "$L/bench.err"
fi

# Not part of `all` (about 30 s): where a CUDA round trip's host time goes, step by
# step in both processes (RPCJOB_TRACE; benchmarks/profile/trace_timeline.py), for the
# small call and the 400 MB one, each in a run of its own (RPCJOB_BENCH_ONLY), the
# warm-up windows left out. The GPU's copies show as the gaps no host step fills.
if [[ $stages == *" trace "* ]]; then
  for part in small 400mb recipe; do
    rm -rf "$L/trace-$part"
    mkdir -p "$L/trace-$part"
    # recipe: 11 iterations in CPU mode, then 11 in CUDA mode and 4 x 11 more CUDA ones
    # (RPCJOB_BENCH_RECIPE_REPEAT); a window is one iteration (autograd.released).
    RPCJOB_TRACE=$L/trace-$part RPCJOB_BENCH_ONLY=$part RPCJOB_BENCH_TRACE=1 \
      RPCJOB_BENCH_BREAKDOWN=1 RPCJOB_BENCH_RECIPE_REPEAT=4 timeout 120 \
      $B/tests/gpu/rpcjob-gpu-bench >"$L/trace-$part.json" 2>"$L/trace-$part.err"
    say "traced $part rc=$?: $(cat "$L/trace-$part.json")"
    between=call.send step=()
    if [[ $part == small ]]; then skip=300 count=2000; else skip=5 count=40; fi
    if [[ $part == recipe ]]; then between=autograd.released skip=24 count=40; fi
    # 400 MB: does each round trip follow its front, the request's copy on its
    # stream? By default the caller's push into a landing offer (lane.pushed, in
    # the caller's process); TRACE_STEP=lane.enqueued TRACE_STEP_ELSEWHERE=1 for
    # the worker's pull (RPCJOB_LANE_PUSH=0), nvlink.enqueued for TensorPipe's.
    if [[ $part == 400mb ]]; then
      between=call.pack step=(--step "${TRACE_STEP:-lane.pushed}")
      [[ ${TRACE_STEP_ELSEWHERE:-0} == 1 ]] && step+=(--step-elsewhere)
    fi
    python3 benchmarks/profile/trace_timeline.py "$L/trace-$part" --between $between \
      --from $skip --count $count --show 2 --top 25 "${step[@]}" >"$OUT/trace-$part.txt" 2>&1
    sed -n '/where the time goes/,$p' "$OUT/trace-$part.txt" | head -16 | tee -a "$S"
    ((${#step[@]})) && tail -1 "$OUT/trace-$part.txt" | tee -a "$S"
    # nvlink.ready is a step of the one-GPU protocol alone (nvlink_channel.h): on two
    # GPUs the pair must use the cross-GPU one (until 9fcaf7e it did not).
    if ((GPUS > 1)); then
      n=$(cat "$L/trace-$part"/trace-*.txt 2>/dev/null | grep -c ' nvlink.ready ')
      if ((n == 0)); then
        say "trace $part: cuda:0 -> cuda:1 on the cross-GPU protocol (no nvlink.ready step): OK"
      else
        say "trace $part: FAIL $n nvlink.ready steps: cuda:0 -> cuda:1 took the one-GPU protocol"
      fi
    fi
  done
fi

# Not part of `all`: the 400 MB CUDA round trip alone (issue 20), RT400_RUNS fresh runs
# (default 3) per entry of VARIANTS (environment assignments joined by commas, "default"
# for none; alternating), each beside the bound measured in the same process: the
# copies on one stream of cuda:0, pulled both ways, pushed both ways, and pulled through
# as many stream hand-offs as ours; first, once, rpcjob-nvlink-floor.
if [[ $stages == *" rt400 "* ]]; then
  # The same round trip between two processes with nothing but the CUDA runtime
  # (benchmarks/gpu/nvlink_floor.cc): what two processes cost before any of ours.
  timeout 120 $B/tests/gpu/rpcjob-nvlink-floor 2>>"$L/rt400.err" | tee -a "$S"
  field() { grep -o "\"$1\": [0-9.]*" <<<"$line" | awk '{print $2}'; }  # of the run's $line
  for round in $(seq 1 "${RT400_RUNS:-3}"); do
    for v in ${VARIANTS:-default}; do
      env=()
      [[ $v != default ]] && IFS=',' read -r -a env <<<"$v"
      line=$(env "${env[@]}" RPCJOB_BENCH_ONLY=400mb timeout 120 $B/tests/gpu/rpcjob-gpu-bench \
        2>>"$L/rt400.err")
      ours=$(field rt400mb_ms) bound=$(field raw_rt400mb_ms)
      say "400 MB, $v, run $round: ours $ours ms ($(awk -v o="$ours" -v b="$bound" \
        'BEGIN { if (o > 0) printf "%.1f", 100 * b / o }') % of the bound $bound ms;" \
        "pulled both ways $(field raw_pull_rt400mb_ms), pushed $(field raw_push_rt400mb_ms)," \
        "pulled through our stream hand-offs $(field raw_pull_hops_rt400mb_ms);" \
        "lane frames $(field lane_frames), pushed $(field lane_pushed))"
    done
  done
fi

# Not part of `all`: whether where the CPU bench's two processes run decides its async
# rate (issue 22): benchmarks/profile/async-placement.sh, PLACEMENT_RUNS rounds (default 3).
if [[ $stages == *" placement "* ]]; then
  OUT=$OUT timeout 300 bash benchmarks/profile/async-placement.sh $B/worker "${PLACEMENT_RUNS:-3}" \
    2>"$L/placement.err" >>"$S"
fi

# Not part of `all` (about 3 minutes): the metrics overhead in the same two processes,
# every recorder switched, then one at a time (what each costs; rpcjob-bench --recorders).
if [[ $stages == *" metrics "* ]]; then
  for r in ${RECORDERS:-all none observer transports channels}; do
    timeout 170 $B/worker/rpcjob-bench --metrics --rounds ${ROUNDS:-200} --recorders $r \
      --slice ${SLICE:-25} \
      2>>"$L/metrics_overhead.err" | tee -a "$L/metrics_overhead.txt" |
      grep -E "^(Same|small call RTT p50|async calls)" | head -3 | tee -a "$S"
  done
fi

# Not part of `all`: where the recipe's host time goes (issue 20). SPINS (a list of
# RPCJOB_SPIN_US values, "default" for none; "none" leaves this out) times the recipe
# alone, three fresh runs each, alternating; then benchmarks/profile/gpu-bench-threads.sh
# samples every thread of both processes while each of PROFILE_PARTS (default recipe;
# 400mb: the 400 MB round trip) repeats ($OUT/PART-threads.txt; carry build-perf for a
# perf of its own).
if [[ $stages == *" profile "* ]]; then
  for round in 1 2 3; do
    for spin in ${SPINS:-default}; do
      [[ $spin == none ]] && continue
      env=()
      [[ $spin != default ]] && env=("RPCJOB_SPIN_US=$spin")
      line=$(env "${env[@]}" RPCJOB_BENCH_ONLY=recipe RPCJOB_BENCH_RECIPE_REPEAT=4 timeout 120 \
        $B/tests/gpu/rpcjob-gpu-bench 2>"$L/profile-$spin-$round.err" |
        grep -o '"recipe_cuda_rpc_s": [0-9.]*')
      repeats=$(grep -o 'repeat [0-9]*: [0-9.]*' "$L/profile-$spin-$round.err" | awk '{print $3}' |
        paste -sd' ')
      say "recipe, RPCJOB_SPIN_US=$spin, run $round: $line; repeats: $repeats"
    done
  done
  for part in ${PROFILE_PARTS:-recipe}; do
    PART=$part OUT=$OUT timeout 300 bash benchmarks/profile/gpu-bench-threads.sh \
      $B/tests/gpu/rpcjob-gpu-bench 4
    say "$part-threads rc=$?: $(head -3 "$OUT/$part-threads.txt" | tr '\n' ' ')"
  done
fi
