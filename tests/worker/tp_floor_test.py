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
import json

from floor_checks import bench_json, check_bench_without, fail, run

CALLS, MESSAGES, WINDOW, ROUNDS, ITERATIONS, PAYLOAD = 150, 700, 16, 2, 4, 100
TENSOR = 1 << 20


def check_run(floor):
    r = run([floor, "--quick", "--json", "--calls", str(CALLS), "--messages", str(MESSAGES),
             "--window", str(WINDOW), "--rounds", str(ROUNDS), "--iterations", str(ITERATIONS),
             "--payload", str(PAYLOAD), "--tensor-bytes", str(TENSOR)])
    if r.returncode != 0:
        fail(f"exit code {r.returncode}; stderr: {r.stderr}")
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        fail(f"expected one JSON line, got: {r.stdout!r}")
    j = json.loads(lines[0])
    expected = {"payload_bytes": PAYLOAD, "chained_calls": CALLS, "blocking_calls": CALLS,
                "pipelined_window": WINDOW, "pipelined_messages": MESSAGES,
                "burst_messages": MESSAGES, "rounds": ROUNDS, "tensor_bytes": TENSOR,
                "tensor_basic_iterations": ITERATIONS}
    for key, want in expected.items():
        if j.get(key) != want:
            fail(f"{key} = {j.get(key)!r}, asked for {want}")
    if j.get("transport") not in ("shm", "uv"):
        fail(f"transport = {j.get('transport')!r}")
    for kind in ("chained", "blocking"):
        p50, p99 = j.get(kind + "_p50_us"), j.get(kind + "_p99_us")
        if not (isinstance(p50, (int, float)) and isinstance(p99, (int, float)) and p99 >= p50 > 0):
            fail(f"{kind}: p50 {p50!r}, p99 {p99!r}: want p99 >= p50 > 0")
    for key in ("pipelined_msgs_per_s", "burst_msgs_per_s", "tensor_basic_ms"):
        if not (isinstance(j.get(key), (int, float)) and j[key] > 0):
            fail(f"{key} = {j.get(key)!r}, want > 0")
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
    r = run([floor, "--quick", "--json", "--calls", "20", "--messages", "50", "--iterations", "1",
             "--tensor-bytes", str(TENSOR), "--corrupt-echo", what])
    if r.returncode != 1 or "echo mismatch" not in r.stderr:
        fail(f"--corrupt-echo {what}: exit code {r.returncode}, stderr {r.stderr!r}; "
             "want 1 and an echo mismatch")
    if r.stdout.strip():
        fail(f"--corrupt-echo {what}: printed figures anyway: {r.stdout!r}")
    print(f"ok: a spoiled echo ({what}) fails the run: {r.stderr.strip()}")


def check_usage(floor):
    for argv in (["--payload", "0"], ["--calls", "x"], ["--bogus"], ["--corrupt-echo", "-1"]):
        r = run([floor] + argv)
        if r.returncode != 2 or "usage" not in r.stderr:
            fail(f"{argv}: exit code {r.returncode}, want 2 and the usage")
    print("ok: bad arguments are a usage error")


TP_KEYS = ["tp_small_rtt_p50_us", "tp_small_rtt_p99_us", "tp_chained_rtt_p50_us",
           "tp_chained_rtt_p99_us", "tp_async_msgs_per_s", "tp_pipelined_msgs_per_s",
           "tp_pipelined_window", "tp_rtt_4mb_basic_ms", "tp_payload_bytes"]
BOUND_KEYS = ["rtt_4mb_bound_ms", "rtt_4mb_of_bound", "memcpy_4mb_gbps", "memcpy_4mb_threads"]


def check_bench_with_floor(bench, floor):
    code, j = bench_json(bench, ["--floor", floor])
    if code != 0:
        fail(f"rpcjob-bench with the floor: exit code {code}")
    for key in TP_KEYS + BOUND_KEYS + ["small_rtt_p50_us"]:
        if not (isinstance(j.get(key), (int, float)) and j[key] > 0):
            fail(f"rpcjob-bench: {key} = {j.get(key)!r}, want > 0")
    if j["tp_payload_bytes"] != 69 or j.get("tp_transport") not in ("shm", "uv"):
        fail(f"rpcjob-bench: tp_payload_bytes {j['tp_payload_bytes']}, "
             f"tp_transport {j.get('tp_transport')!r}")
    if not j.get("tp_rtt_4mb_ms") and j.get("tp_rtt_4mb_ms") is not None:
        fail(f"rpcjob-bench: tp_rtt_4mb_ms = {j['tp_rtt_4mb_ms']!r}")
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
