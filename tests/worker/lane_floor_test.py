#!/usr/bin/env python3
"""rpcjob-lane-floor (benchmarks/floor/) runs for real between its two processes.

1. A short run with counts of our choosing: its JSON has every key, the counts
   and payload it measured are those asked for, p99 >= p50 > 0, the rate > 0.
2. A server that spoils one echo: the client's check must catch it (exit code
   1, "echo mismatch" on stderr, no figures printed).
3. Bad arguments: exit code 2 and the usage.
4. rpcjob-bench --no-large --json: the lane_* keys beside ours, positive; with
   --lane-floor naming no program: exit code 1 at once, naming it; with a lane
   floor that fails: ours still printed, the lane_* values null, exit code 1.
No timing thresholds: figures are checked for shape, not speed.
"""

import argparse
import json

from floor_checks import bench_json, check_bench_without, fail, run

CALLS, MESSAGES, ROUNDS, PAYLOAD = 300, 5000, 2, 100
LANE_KEYS = ["lane_small_rtt_p50_us", "lane_small_rtt_p99_us", "lane_async_msgs_per_s",
             "lane_payload_bytes"]


def check_run(floor):
    r = run([floor, "--json", "--calls", str(CALLS), "--messages", str(MESSAGES),
             "--rounds", str(ROUNDS), "--payload", str(PAYLOAD)])
    if r.returncode != 0:
        fail(f"exit code {r.returncode}; stderr: {r.stderr}")
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        fail(f"expected one JSON line, got: {r.stdout!r}")
    j = json.loads(lines[0])
    for key, want in {"payload_bytes": PAYLOAD, "burst_messages": MESSAGES,
                      "rounds": ROUNDS}.items():
        if j.get(key) != want:
            fail(f"{key} = {j.get(key)!r}, asked for {want}")
    p50, p99 = j.get("chained_p50_us"), j.get("chained_p99_us")
    if not (isinstance(p50, (int, float)) and isinstance(p99, (int, float)) and p99 >= p50 > 0):
        fail(f"chained: p50 {p50!r}, p99 {p99!r}: want p99 >= p50 > 0")
    if not (isinstance(j.get("burst_msgs_per_s"), (int, float)) and j["burst_msgs_per_s"] > 0):
        fail(f"burst_msgs_per_s = {j.get('burst_msgs_per_s')!r}, want > 0")
    print(f"ok: a real run, {p50} us round trip, {j['burst_msgs_per_s']} messages/s")


def check_spoiled(floor):
    # The 200th echo: in the chained phase; the 1500th with 1000 calls: in the burst.
    for n, calls in (("200", "300"), ("1500", "100")):
        r = run([floor, "--json", "--calls", calls, "--messages", "2000", "--rounds", "1",
                 "--corrupt-echo", n])
        if r.returncode != 1 or "echo mismatch" not in r.stderr:
            fail(f"--corrupt-echo {n}: exit code {r.returncode}, stderr {r.stderr!r}; "
                 "want 1 and an echo mismatch")
        if r.stdout.strip():
            fail(f"--corrupt-echo {n}: printed figures anyway: {r.stdout!r}")
    print("ok: a spoiled echo fails the run, in either phase")


def check_usage(floor):
    for argv in (["--payload", "4"], ["--calls", "x"], ["--bogus"], ["--corrupt-echo", "0"],
                 ["--rounds"]):
        r = run([floor] + argv)
        if r.returncode != 2 or "usage" not in r.stderr:
            fail(f"{argv}: exit code {r.returncode}, want 2 and the usage")
    print("ok: bad arguments are a usage error")


def check_bench(bench, floor):
    code, j = bench_json(bench, ["--lane-floor", floor])
    if code != 0:
        fail(f"rpcjob-bench with the lane floor: exit code {code}")
    for key in LANE_KEYS:
        if not (isinstance(j.get(key), (int, float)) and j[key] > 0):
            fail(f"rpcjob-bench: {key} = {j.get(key)!r}, want > 0")
    if j["lane_payload_bytes"] != 55:
        fail(f"rpcjob-bench: lane_payload_bytes {j['lane_payload_bytes']}, want 55")
    print(f"ok: rpcjob-bench beside the lane floor: ours {j['async_calls_per_s']} calls/s, "
          f"the rings alone {j['lane_async_msgs_per_s']} messages/s")
    check_bench_without(bench, "--lane-floor", "rpcjob-lane-floor", LANE_KEYS)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--floor", required=True)
    parser.add_argument("--bench")
    args = parser.parse_args()
    check_run(args.floor)
    check_spoiled(args.floor)
    check_usage(args.floor)
    if args.bench:
        check_bench(args.bench, args.floor)


if __name__ == "__main__":
    main()
