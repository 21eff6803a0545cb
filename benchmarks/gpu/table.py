"""Prints the GPU benchmark table (markdown) from bench.jsonl and the CPU bench's JSON."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
# rpcjob-recipe-floor's line: the recipe's GPU work alone, printed after the table.
floor = next((r for r in rows if r["impl"] == "recipe floor"), None)
rows = [r for r in rows if r["impl"] != "recipe floor"]
print("| implementation | devices | channel | small CUDA call p50 / p99 (us) | 4 MB CUDA round trip (ms) "
      "| 400 MB CUDA round trip, p50 (p10-p90) (ms) | 400 MB effective (GB/s) | model split, 10 fwd (s) "
      "| recipe, 10 fwd+bwd, CPU RPC (s) | recipe, 10 fwd+bwd, CUDA RPC (s), median of the blocks |")
print("|---|---|---|---|---|---|---|---|---|---|")
raw = None


def cell(value):
    """A figure, or n/a where the row's run did not measure it (null in its JSON)."""
    return "n/a" if value is None else value


for r in rows:
    spread = r.get("rt400mb_p10_p90_ms")
    spread = f" ({spread[0]}-{spread[1]})" if spread else ""
    print(f"| {r['impl']} | {r.get('devices', 'cuda:0->cuda:1')} | {r['channel']} "
          f"| {cell(r.get('small_p50_us'))} / {cell(r.get('small_p99_us'))} | {cell(r.get('rt4mb_ms'))} "
          f"| {cell(r.get('rt400mb_ms'))}{spread} | {cell(r.get('rt400mb_gbs'))} | {r['model_split_s']} "
          f"| {r.get('recipe_cpu_rpc_s', 'n/a')} | {r.get('recipe_cuda_rpc_s', 'n/a')} |")
    if r.get("raw_rt400mb_ms"):
        raw = raw or r
# The CUDA recipe's blocks of 10 iterations in a row, each implementation's (the median above).
blocked = [r for r in rows if r.get("recipe_cuda_rpc_blocks_s")]
if blocked:
    print("\nThe CUDA recipe's blocks of 10 iterations, in order (s):\n")
    for r in blocked:
        b = r["recipe_cuda_rpc_blocks_s"]
        print(f"- {r['impl']}, {r['channel']}: {', '.join(str(x) for x in b)} "
              f"(median {r['recipe_cuda_rpc_s']}, min {min(b)})")
if floor:
    ours = [r["recipe_cuda_rpc_s"] for r in rows if r["impl"] == "rpcjob" and r.get("recipe_cuda_rpc_s")]
    print(f"\nThe recipe's floor, same run (rpcjob-recipe-floor: its GPU work with no RPC, the halves "
          f"on {floor['devices']}, median of {floor['blocks']} blocks of 10 iterations): two processes "
          f"{floor['two_processes_s']} s (min {floor['two_processes_min_s']}), both halves in one "
          f"process with the same waits {floor['one_process_s']} s, the GPU work alone "
          f"{floor['one_process_gpu_s']} s."
          + (f" rpcjob's CUDA RPC mode above (the median of its blocks): "
             f"{min(ours) / floor['two_processes_s']:.2f}x the two-process floor at best." if ours else ""))
if raw:
    there = raw.get("devices", "cuda:0->cuda:1").split("->")[-1]
    print(f"\nThe hardware's bound, same run: cudaMemcpyPeerAsync cuda:0 -> {there} -> cuda:0 in one "
          f"process, one stream: 4 MB {raw.get('raw_rt4mb_ms', 'n/a')} ms, 400 MB {raw['raw_rt400mb_ms']} ms "
          f"({raw['raw_rt400mb_gbs']} GB/s effective). Each implementation's share of it "
          "(bound / round trip; issue 20's target: >= 98 %):\n")
    print("| implementation | channel | 4 MB | 400 MB |\n|---|---|---|---|")
    # Rows of the recipe alone (RPCJOB_BENCH_ONLY=recipe) measured no round trip.
    for r in (r for r in rows if r.get("small_p50_us")):
        def share(key, bound):
            return f"{100 * bound / r[key]:.1f} %" if bound and r.get(key) else "n/a"
        print(f"| {r['impl']} | {r['channel']} | {share('rt4mb_ms', raw.get('raw_rt4mb_ms'))} "
              f"| {share('rt400mb_ms', raw['raw_rt400mb_ms'])} |")
    # Two GPUs: the same two copies, each issued by the GPU it lands on (a pull, as
    # cuda_nvlink's receiver copies) or by the one it leaves (a push).
    if raw.get("raw_pull_rt400mb_ms"):
        print(f"\nThe same 400 MB copies pulled both ways (each on a stream of the GPU it lands on, an "
              f"event between): {raw['raw_pull_rt400mb_ms']} ms; pushed both ways: "
              f"{raw.get('raw_push_rt400mb_ms', 'n/a')} ms; pulled both ways through as many stream "
              f"hand-offs as a round trip through rpcjob (two more streams at the worker, one more "
              f"at the caller): {raw.get('raw_pull_hops_rt400mb_ms', 'n/a')} ms.")
# CPU: rpcjob-bench --json and PyTorch's RPC (torch_rpc_bench.py's cpu_* figures), same run,
# beside issue 22's targets; the 4 MB and 400 MB bounds are rpcjob-bench's memcpy measurements
# (same run), "TensorPipe alone" its run of rpcjob-tp-floor (benchmarks/floor/, same run, tp_* keys).
CPU_ROWS = [("small CPU call p50 (us)", "small_rtt_p50_us", "<= 10"),
            ("small CPU call p99 (us)", "small_rtt_p99_us", "<= 25"),
            ("async calls/s (one caller)", "async_calls_per_s", ">= 1,000,000"),
            ("  the same in a CallBatch (opt-in)", "async_batched_calls_per_s", ">= 1,000,000"),
            ("4 MB CPU round trip (ms)", "rtt_4mb_ms", "<= 0.3"),
            ("400 MB CPU round trip (ms)", "rtt_400mb_ms", ">= 80 % of the bound"),
            # The caller opted in: useSharedHostAllocator() puts its tensors in the arena.
            ("4 MB CPU round trip, shared allocator (ms)", "rtt_4mb_shared_ms", "<= 0.3"),
            ("400 MB CPU round trip, shared allocator (ms)", "rtt_400mb_shared_ms",
             ">= 80 % of the bound")]
torch_cpu = next((r for r in rows if r.get("impl") == "pytorch" and "cpu_small_rtt_p50_us" in r), {})



# rpcjob-bench's bound of a CPU round trip (4 MB, 400 MB) and our share of it:
# (size in rpcjob-bench's keys, how the row says it, the suffix of its bandwidth
# keys, decimals).
COPY_BOUNDS = {"rtt_4mb_ms": ("4mb", "2 x 4 MiB", "_4mb", 3),
               "rtt_400mb_ms": ("400mb", "2 x 400 MB", "", 2),
               "rtt_4mb_shared_ms": ("4mb", "2 x 4 MiB", "_4mb", 3),
               "rtt_400mb_shared_ms": ("400mb", "2 x 400 MB", "", 2)}


def copy_bound(cpu, key):
    if key not in COPY_BOUNDS:
        return "", ""
    size, what, suffix, d = COPY_BOUNDS[key]
    if not cpu.get(f"rtt_{size}_bound_ms"):
        return "", ""
    if key.endswith("_shared_ms"):
        # The same bounds as the row above; the 4 MB one also with threads started beforehand.
        if not cpu.get(f"rtt_{size}_shared_of_bound"):
            return "as above", ""
        share = f"{cpu[f'rtt_{size}_shared_of_bound'] * 100:.0f} %"
        if cpu.get("rtt_4mb_shared_of_pool_bound") and size == "4mb":
            share += f" ({cpu['rtt_4mb_shared_of_pool_bound'] * 100:.0f} % of the pooled bound)"
        if cpu.get("rtt_4mb_shared_of_pingpong_bound") and size == "4mb":
            share += f" ({cpu['rtt_4mb_shared_of_pingpong_bound'] * 100:.0f} % of the copies alone)"
        return "as above", share
    bound = (f"{cpu[f'rtt_{size}_bound_ms']:.{d}f} ({what} at {cpu[f'memcpy{suffix}_gbps']:.1f} GB/s, "
             f"memcpy, {cpu[f'memcpy{suffix}_threads']} threads)")
    share = f"{cpu[f'rtt_{size}_of_bound'] * 100:.0f} %"
    if cpu.get(f"rtt_{size}_cma_ms"):
        bound += (f"; process_vm_readv alone {cpu[f'rtt_{size}_cma_ms']:.{d}f} "
                  f"({cpu[f'cma{suffix}_gbps']:.1f} GB/s, {cpu[f'cma{suffix}_threads']} threads)")
        share += f" ({cpu[f'rtt_{size}_of_cma'] * 100:.0f} % of process_vm_readv)"
    # How each leg moved its bytes (rpcjob-bench's path_4mb, path_400mb): memcpy (mapped,
    # pushed) or process_vm_readv, which would explain a round trip at the latter's speed.
    if cpu.get(f"path_{size}"):
        share += f" ({cpu[f'path_{size}']})"
    if size == "4mb" and cpu.get("rtt_4mb_pool_bound_ms"):
        bound += (f"; threads started beforehand {cpu['rtt_4mb_pool_bound_ms']:.{d}f} "
                  f"({cpu['memcpy_4mb_pool_gbps']:.1f} GB/s, {cpu['memcpy_4mb_pool_threads']} threads)")
        share += f" ({cpu['rtt_4mb_of_pool_bound'] * 100:.0f} % of the pooled bound)"
    if size == "4mb" and cpu.get("rtt_4mb_pingpong_bound_ms"):
        bound += (f"; the round trip's copies alone, between two spinning thread groups "
                  f"{cpu['rtt_4mb_pingpong_bound_ms']:.{d}f} ({cpu['memcpy_4mb_pingpong_threads']} "
                  f"threads each)")
        share += f" ({cpu['rtt_4mb_of_pingpong_bound'] * 100:.0f} % of the copies alone)"
    return bound, share

# rpcjob-lane-floor's figures (the lane's rings alone, same run, lane_* keys): the
# floor under our small calls and async rate, whose messages travel on the lane.
LANE_BOUNDS = {"small_rtt_p50_us": ("lane_small_rtt_p50_us", "us"),
               "small_rtt_p99_us": ("lane_small_rtt_p99_us", "us"),
               "async_calls_per_s": ("lane_async_msgs_per_s", "messages/s")}


def lane_bound(cpu, key):
    if key not in LANE_BOUNDS or not cpu.get(LANE_BOUNDS[key][0]) or not cpu.get(key):
        return "", ""
    lane_key, unit = LANE_BOUNDS[key]
    bound = f"{cpu[lane_key]:.{0 if unit == 'messages/s' else 2}f} {unit}, the lane's rings alone"
    share = (f"{100 * cpu[key] / cpu[lane_key]:.0f} % of its rate" if unit == "messages/s"
             else f"{cpu[key] / cpu[lane_key]:.1f}x its round trip")
    return bound, share


def tensorpipe_alone(cpu, key):
    """The TensorPipe-alone cell: the floor for ours, in brackets what it is made of."""
    def v(k):
        x = cpu.get(k)
        return "n/a" if x is None else f"{x:.2f}" if isinstance(x, float) and x < 1000 else f"{x:.0f}"
    if key in ("small_rtt_p50_us", "small_rtt_p99_us"):
        q = key.split("_")[2]
        return f"{v('tp_small_rtt_' + q + '_us')} (chained {v('tp_chained_rtt_' + q + '_us')})"
    if key == "async_calls_per_s":
        return (f"{v('tp_async_msgs_per_s')} (window {v('tp_pipelined_window')}: "
                f"{v('tp_pipelined_msgs_per_s')})")
    if key == "rtt_4mb_ms":
        return f"{v('tp_rtt_4mb_ms')} cma (basic {v('tp_rtt_4mb_basic_ms')})"
    return ""
if len(sys.argv) > 2:
    try:
        text = open(sys.argv[2]).read().strip()
        print("\nCPU rpcjob-bench --json (same run):\n")
        print("```json\n" + text[:3000] + "\n```")
        cpu = next(json.loads(l) for l in text.splitlines() if l.strip().startswith("{"))
        print(f"\n| CPU measurement | rpcjob ({cpu.get('transport', '?')}/{cpu.get('channel', '?')}) "
              f"| TensorPipe alone ({cpu.get('tp_transport') or '?'}) "
              "| PyTorch RPC | target (issue 22) | bound | rpcjob / bound |")
        print("|---|---|---|---|---|---|---|")
        for label, key, target in CPU_ROWS:
            bound, share = copy_bound(cpu, key)
            if not bound:
                bound, share = lane_bound(cpu, key)
            print(f"| {label} | {cpu.get(key, 'n/a')} | {tensorpipe_alone(cpu, key)} "
                  f"| {torch_cpu.get('cpu_' + key, 'n/a')} | {target} | {bound} | {share} |")
        if "tp_small_rtt_p50_us" in cpu:
            print(f"\nTensorPipe alone: rpcjob-tp-floor in the same run, no rpcjob code, "
                  f"{cpu.get('tp_payload_bytes')}-byte messages (our small call's), the server echoing "
                  "from its read callback. Small calls: a thread waits for each echo (chained: the "
                  "next write from the read callback, no hand-off); async: all in flight at once "
                  "(ours batches calls into one message, TensorPipe alone does not); 4 MB: TensorPipe's "
                  "cma (ours: rpcjob_cma, the copy split over threads).")
    except (OSError, StopIteration, ValueError, KeyError) as e:
        print(f"(no CPU bench: {e})")
