#!/usr/bin/env python3
"""rpcjob-tp-floor (benchmarks/floor/) runs for real between its two processes.

1. A short run with counts of our choosing (not the defaults): its JSON has
   every key, the counts it measured equal those asked for, the payload size
   is the one asked for, p99 >= p50 > 0 for both round trips, every rate and
   tensor round trip is positive (cma's may be null only where the program
   says cma is not viable), and it checked at least as many echoes as it timed.
2. A server that spoils one echo (a small message's, then a tensor's): the
   client's check must catch it, exit code 1, "echo mismatch" on stderr.
3. Bad arguments: exit code 2.
4. rpcjob-bench with --floor naming no program: exit code 1 at once, with a
   message naming the missing program.
5. rpcjob-bench --no-large --json with the real floor: every tp_* key and the
   4 MB bound's keys are there and positive; with a floor that fails: ours is
   still printed, every tp_* value null, exit code 1.
No timing thresholds: figures are checked for shape, not speed.
"""

import argparse

from floor_checks import (bench_json, check_bench_without, expect_asked, expect_percentiles,
                          expect_positive, expect_spoiled, expect_usage_errors, fail,
                          program_json)

CALLS, MESSAGES, WINDOW, ROUNDS, ITERATIONS, PAYLOAD = 150, 700, 16, 2, 4, 100
TENSOR = 1 << 20


def check_run(floor):
    j = program_json([floor, "--quick", "--json", "--calls", str(CALLS), "--messages",
                      str(MESSAGES), "--window", str(WINDOW), "--rounds", str(ROUNDS),
                      "--iterations", str(ITERATIONS), "--payload", str(PAYLOAD),
                      "--tensor-bytes", str(TENSOR)])
    expect_asked(j, {"payload_bytes": PAYLOAD, "chained_calls": CALLS, "blocking_calls": CALLS,
                "pipelined_window": WINDOW, "pipelined_messages": MESSAGES,
                "burst_messages": MESSAGES, "rounds": ROUNDS, "tensor_bytes": TENSOR,
                "tensor_basic_iterations": ITERATIONS})
    if j.get("transport") not in ("shm", "uv"):
        fail(f"transport = {j.get('transport')!r}")
    for kind in ("chained", "blocking"):
        expect_percentiles(j, kind)
    expect_positive(j, ["pipelined_msgs_per_s", "burst_msgs_per_s", "tensor_basic_ms"])
    if j.get("cma") == "viable":
        if j.get("tensor_cma_iterations") != ITERATIONS or not (j.get("tensor_cma_ms") or 0) > 0:
            fail(f"cma viable but tensor_cma_iterations {j.get('tensor_cma_iterations')!r}, "
                 f"tensor_cma_ms {j.get('tensor_cma_ms')!r}")
    elif j.get("tensor_cma_ms") is not None or j.get("tensor_cma_iterations") != 0:
        fail(f"cma {j.get('cma')!r} yet a cma figure: {j.get('tensor_cma_ms')!r}")
    timed = 2 * CALLS + 2 * ROUNDS * MESSAGES + ITERATIONS * (2 if j["cma"] == "viable" else 1)
    if not (isinstance(j.get("echoes_verified"), int) and j["echoes_verified"] >= timed):
        fail(f"echoes_verified = {j.get('echoes_verified')!r}, at least {timed} were timed")
    print(f"ok: a real run, {j['echoes_verified']} echoes verified over {j['transport']}")


def check_spoiled(floor, what):
    stderr = expect_spoiled([floor, "--quick", "--json", "--calls", "20", "--messages", "50",
                             "--iterations", "1", "--tensor-bytes", str(TENSOR)], what)
    print(f"ok: a spoiled echo ({what}) fails the run: {stderr.strip()}")


def check_usage(floor):
    expect_usage_errors(floor, (["--payload", "0"], ["--calls", "x"], ["--bogus"],
                                ["--corrupt-echo", "-1"]))


TP_KEYS = ["tp_small_rtt_p50_us", "tp_small_rtt_p99_us", "tp_chained_rtt_p50_us",
           "tp_chained_rtt_p99_us", "tp_async_msgs_per_s", "tp_pipelined_msgs_per_s",
           "tp_pipelined_window", "tp_rtt_4mb_basic_ms", "tp_payload_bytes"]
BOUND_KEYS = ["rtt_4mb_bound_ms", "rtt_4mb_of_bound", "memcpy_4mb_gbps", "memcpy_4mb_threads",
              "rtt_4mb_pingpong_bound_ms", "memcpy_4mb_pingpong_threads",
              "rtt_4mb_of_pingpong_bound", "rtt_4mb_shared_ms",
              "rtt_4mb_shared_of_pingpong_bound"]


def check_paths(bench, floor, j):
    """How the 4 MB round trip moved its bytes (path_4mb): the request pushed into the worker's
    arena (a received tensor of 4 MiB lands there), the reply read from it with memcpy; with
    the push off (RPCJOB_MTCMA_PUSH=0) the request goes by process_vm_readv. --no-large: no
    400 MB round trip, no path for it. Only where rpcjob_cma carries the pair."""
    if j.get("channel") != "rpcjob_cma":
        print(f"skipped: the copy paths (the pair's channel is {j.get('channel')!r})")
        return
    want = "request pushed, reply mapped"
    if j.get("path_4mb") != want or j.get("path_400mb") != "":
        fail(f"rpcjob-bench: path_4mb {j.get('path_4mb')!r} (want {want!r}), "
             f"path_400mb {j.get('path_400mb')!r} (want '' with --no-large)")
    code, off = bench_json(bench, ["--floor", floor], env={"RPCJOB_MTCMA_PUSH": "0"})
    want_off = "request process_vm_readv, reply mapped"
    if code != 0 or off.get("path_4mb") != want_off:
        fail(f"rpcjob-bench, push off: exit code {code}, path_4mb {off.get('path_4mb')!r} "
             f"(want {want_off!r})")
    print(f"ok: the 4 MB round trip's paths: {want!r}; push off: {want_off!r}")


def check_bench_with_floor(bench, floor):
    code, j = bench_json(bench, ["--floor", floor])
    if code != 0:
        fail(f"rpcjob-bench with the floor: exit code {code}")
    expect_positive(j, TP_KEYS + BOUND_KEYS + ["small_rtt_p50_us"], "rpcjob-bench: ")
    if j["tp_payload_bytes"] != 69 or j.get("tp_transport") not in ("shm", "uv"):
        fail(f"rpcjob-bench: tp_payload_bytes {j['tp_payload_bytes']}, "
             f"tp_transport {j.get('tp_transport')!r}")
    if not j.get("tp_rtt_4mb_ms") and j.get("tp_rtt_4mb_ms") is not None:
        fail(f"rpcjob-bench: tp_rtt_4mb_ms = {j['tp_rtt_4mb_ms']!r}")
    check_paths(bench, floor, j)
    print(f"ok: rpcjob-bench beside the floor: ours {j['small_rtt_p50_us']} us, "
          f"TensorPipe alone {j['tp_small_rtt_p50_us']} us at p50")
    check_bench_without(bench, "--floor", "rpcjob-tp-floor",
                        TP_KEYS + ["tp_rtt_4mb_ms", "tp_transport"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--floor", required=True)
    parser.add_argument("--bench")
    args = parser.parse_args()
    check_run(args.floor)
    check_spoiled(args.floor, "3")
    check_spoiled(args.floor, "tensor")
    check_usage(args.floor)
    if args.bench:
        check_bench_with_floor(args.bench, args.floor)


if __name__ == "__main__":
    main()
