"""What tp_floor_test.py and lane_floor_test.py check alike: running a program,
rpcjob-bench's JSON, and rpcjob-bench with a floor program that is missing or fails."""

import json
import os
import subprocess
import sys
import tempfile


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def run(argv, timeout=60):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def bench_json(bench, extra):
    """rpcjob-bench --no-large --json plus `extra`: its exit code and its one JSON object."""
    r = run([bench, "--no-large", "--json"] + extra, timeout=100)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        fail(f"rpcjob-bench {extra}: exit code {r.returncode}, stdout {r.stdout!r}, "
             f"stderr {r.stderr[-2000:]!r}")
    return r.returncode, json.loads(lines[0])


def check_bench_without(bench, option, program, keys):
    """rpcjob-bench with `option` naming no program: exit code 1 at once, naming it; naming
    a `program` that fails: ours still printed, every one of `keys` null, exit code 1."""
    missing = "/nonexistent/" + program
    r = run([bench, "--no-large", "--json", option, missing], timeout=20)
    if r.returncode != 1 or missing not in r.stderr or "missing" not in r.stderr:
        fail(f"rpcjob-bench {option} {missing}: exit code {r.returncode}, stderr {r.stderr!r}")
    with tempfile.TemporaryDirectory() as tmp:
        broken = os.path.join(tmp, program)
        with open(broken, "w") as f:
            f.write("#!/bin/sh\necho 'no figures' >&2\nexit 3\n")
        os.chmod(broken, 0o755)
        code, j = bench_json(bench, [option, broken])
    if code != 1:
        fail(f"rpcjob-bench with a failing {program}: exit code {code}, want 1")
    if not (j.get("small_rtt_p50_us") or 0) > 0:
        fail(f"rpcjob-bench with a failing {program} lost our figures: {j}")
    for key in keys:
        if key not in j or j[key] is not None:
            fail(f"rpcjob-bench with a failing {program}: {key} = {j.get(key, 'missing')!r}, "
                 "want null")
    print(f"ok: a missing {program} is named; a failing one leaves ours printed, its keys null")
