"""benchmarks/profile/trace_timeline.py --step over trace files made here, whose answer is known:
windows cut at the caller's call.pack, the worker's nvlink.enqueued at s us into each, each window
2,000 + 2 s us long (so a slope of 2 and a rest of 2,000 + s), one window without the step, and a
later nvlink.enqueued of the caller's in each window that must not be taken for the worker's."""

import os
import re
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks",
                      "profile", "trace_timeline.py")


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def main():
    fronts = [40, 60, 100, 80, None, 50]  # us; None: a window without the step
    with tempfile.TemporaryDirectory() as tmp:
        caller, worker = [], []
        t = 1_000_000_000
        for s in fronts:
            length = 2000 + 2 * (s or 0)
            caller.append((t, "call.pack"))
            if s is not None:
                worker.append((t + s * 1000, "nvlink.enqueued"))
            caller.append((t + 1500 * 1000, "nvlink.enqueued"))  # the reply's copy, later
            t += length * 1000
        caller.append((t, "call.pack"))  # closes the last window
        for name, pid, events in (("trace-100.txt", 100, caller), ("trace-200.txt", 200, worker)):
            with open(os.path.join(tmp, name), "w") as f:
                for ns, what in events:
                    f.write(f"{ns} {pid} {pid} {what} 0\n")
        r = subprocess.run([sys.executable, SCRIPT, tmp, "--between", "call.pack", "--show", "0",
                            "--top", "0", "--step", "nvlink.enqueued", "--step-elsewhere"],
                           capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"exit code {r.returncode}: {r.stderr}")
    last = r.stdout.strip().splitlines()[-1]
    want = [r"^\s*5 windows \(1 without 'nvlink.enqueued'\)",
            r"at 40\.0-100\.0 us", r"the rest 2040\.0-2100\.0 us \(mean 2066\.0\)",
            r"slope on the step 2\.00", r"correlation 1\.00", r"correlation with the step 1\.00"]
    for pattern in want:
        if not re.search(pattern, last):
            fail(f"{pattern!r} not in {last!r}")
    row = re.compile(r"^\s+\d+\.\d\s+\d+\.\d\s+\d+\.\d$")
    rows = [l.split() for l in r.stdout.splitlines() if row.match(l)]
    if [float(row[1]) for row in rows] != [40.0, 60.0, 100.0, 80.0, 50.0]:
        fail(f"the steps per window: {rows}")
    print(f"ok: {last.strip()}")


if __name__ == "__main__":
    main()
