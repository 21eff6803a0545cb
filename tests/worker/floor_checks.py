"""What tp_floor_test.py and lane_floor_test.py check alike: a floor program's JSON and
its figures' shape, a spoiled echo, usage errors, rpcjob-bench's JSON, and rpcjob-bench
with a floor program that is missing or fails."""

import json
import os
import subprocess
import sys
import tempfile


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def run(argv, timeout=60, env=None):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def one_json(r, who):
    """The one JSON object `who`'s run `r` printed."""
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        fail(f"{who}: exit code {r.returncode}, expected one JSON line, stdout {r.stdout!r}, "
             f"stderr {r.stderr[-2000:]!r}")
    return json.loads(lines[0])


def program_json(argv):
    """A floor program's run that must succeed: its one JSON object."""
    r = run(argv)
    if r.returncode != 0:
        fail(f"exit code {r.returncode}; stderr: {r.stderr}")
    return one_json(r, argv[0])


def expect_asked(j, expected):
    """Each count or size the run was asked for is the one it reports."""
    for key, want in expected.items():
        if j.get(key) != want:
            fail(f"{key} = {j.get(key)!r}, asked for {want}")


def is_number(v):
    return isinstance(v, (int, float))


def expect_percentiles(j, kind):
    """`kind`_p50_us and `kind`_p99_us are numbers with p99 >= p50 > 0."""
    p50, p99 = j.get(kind + "_p50_us"), j.get(kind + "_p99_us")
    if not (is_number(p50) and is_number(p99) and p99 >= p50 > 0):
        fail(f"{kind}: p50 {p50!r}, p99 {p99!r}: want p99 >= p50 > 0")


def expect_positive(j, keys, who=""):
    for key in keys:
        if not (is_number(j.get(key)) and j[key] > 0):
            fail(f"{who}{key} = {j.get(key)!r}, want > 0")


def expect_spoiled(argv, what):
    """A run whose server spoils echo `what`: exit code 1, an echo mismatch, no figures.
    Returns its stderr."""
    r = run(argv + ["--corrupt-echo", what])
    if r.returncode != 1 or "echo mismatch" not in r.stderr:
        fail(f"--corrupt-echo {what}: exit code {r.returncode}, stderr {r.stderr!r}; "
             "want 1 and an echo mismatch")
    if r.stdout.strip():
        fail(f"--corrupt-echo {what}: printed figures anyway: {r.stdout!r}")
    return r.stderr


def expect_usage_errors(floor, argvs):
    for argv in argvs:
        r = run([floor] + argv)
        if r.returncode != 2 or "usage" not in r.stderr:
            fail(f"{argv}: exit code {r.returncode}, want 2 and the usage")
    print("ok: bad arguments are a usage error")


def bench_json(bench, extra, env=None):
    """rpcjob-bench --no-large --json plus `extra` (and `env` added to the environment): its
    exit code and its one JSON object."""
    r = run([bench, "--no-large", "--json"] + extra, timeout=100, env=env)
    return r.returncode, one_json(r, f"rpcjob-bench {extra}")


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
