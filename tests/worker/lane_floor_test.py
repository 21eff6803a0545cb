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

from floor_checks import (bench_json, check_bench_without, expect_asked, expect_percentiles,
                          expect_positive, expect_spoiled, expect_usage_errors, fail,
                          program_json)

CALLS, MESSAGES, ROUNDS, PAYLOAD = 300, 5000, 2, 100
LANE_KEYS = ["lane_small_rtt_p50_us", "lane_small_rtt_p99_us", "lane_async_msgs_per_s",
             "lane_payload_bytes"]


def check_run(floor):
    j = program_json([floor, "--json", "--calls", str(CALLS), "--messages", str(MESSAGES),
                      "--rounds", str(ROUNDS), "--payload", str(PAYLOAD)])
    expect_asked(j, {"payload_bytes": PAYLOAD, "burst_messages": MESSAGES, "rounds": ROUNDS})
    expect_percentiles(j, "chained")
    expect_positive(j, ["burst_msgs_per_s"])
    print(f"ok: a real run, {j['chained_p50_us']} us round trip, "
          f"{j['burst_msgs_per_s']} messages/s")


def check_spoiled(floor):
    # The 200th echo: in the chained phase; the 1500th with 1000 calls: in the burst.
    for n, calls in (("200", "300"), ("1500", "100")):
        expect_spoiled([floor, "--json", "--calls", calls, "--messages", "2000", "--rounds", "1"], n)
    print("ok: a spoiled echo fails the run, in either phase")


def check_usage(floor):
    expect_usage_errors(floor, (["--payload", "4"], ["--calls", "x"], ["--bogus"],
                                ["--corrupt-echo", "0"], ["--rounds"]))


def check_bench(bench, floor):
    code, j = bench_json(bench, ["--lane-floor", floor])
    if code != 0:
        fail(f"rpcjob-bench with the lane floor: exit code {code}")
    expect_positive(j, LANE_KEYS, "rpcjob-bench: ")
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
