#!/usr/bin/env python3
"""Merges the RPCJOB_TRACE files of one run (worker/src/trace/trace.h) into one timeline.

Usage: trace_timeline.py DIR [--between EVENT] [--from K] [--count C] [--show N] [--top N]
                         [--step EVENT [--step-elsewhere]]

The run is cut into windows between consecutive occurrences of EVENT in the
process that records it most often (default autograd.released: one window per training
iteration of a dist_autograd::Context scope), from window K on (default 0: the
windows before K are a warm-up or another phase), C windows at most. Prints the first N windows event by
event (microseconds from the window's start, process and thread), then, over all
windows, where the time goes: the gap before each event, keyed by the event before
it and both processes, as a median per window, largest first. A gap is time in which
no traced step happened: a wake-up, a transfer, a kernel, or code without a point.

--step EVENT: also, per window, when EVENT first happens in it (any process; with
--step-elsewhere, only in the others than the one cutting the windows), and the
window's length less that: whether the window's length follows that step (the 400 MB
CUDA round trip against nvlink.enqueued, the worker's copy on its stream: issue 20's
front), with the correlation of the two over the windows.
"""
import argparse
import bisect
import glob
import os
import statistics
import sys


def load(directory):
    events = []
    for path in sorted(glob.glob(os.path.join(directory, "trace-*.txt"))):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 5:
                    continue
                ns, pid, tid, what, ident = parts
                events.append((int(ns), int(pid), int(tid), what, int(ident)))
    events.sort()
    return events


def labels(events):
    procs, threads = {}, {}
    for _, pid, tid, _, _ in events:
        procs.setdefault(pid, f"p{len(procs)}")
        threads.setdefault((pid, tid), f"{procs[pid]}.t{sum(1 for k in threads if k[0] == pid)}")
    return procs, threads


def cutter(events, between):
    """The process that records `between` most often: its events cut the windows."""
    counts = {}
    for e in events:
        if e[3] == between:
            counts[e[1]] = counts.get(e[1], 0) + 1
    return max(counts, key=counts.get) if counts else None


def windows(events, between):
    first = cutter(events, between)
    times = [e[0] for e in events if e[3] == between and e[1] == first]
    return [(a, b) for a, b in zip(times, times[1:])]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--between", default="autograd.released")
    p.add_argument("--from", dest="first", type=int, default=0)
    p.add_argument("--count", type=int, default=None)
    p.add_argument("--show", type=int, default=1)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--step", default=None)
    p.add_argument("--step-elsewhere", action="store_true",
                   help="the step only in processes other than the one that cuts the windows")
    a = p.parse_args(argv)
    events = load(a.dir)
    if not events:
        print(f"trace_timeline: no trace-*.txt events in {a.dir}", file=sys.stderr)
        return 1
    procs, threads = labels(events)
    spans = windows(events, a.between)[a.first:]
    if a.count is not None:
        spans = spans[:a.count]
    if not spans:
        print(f"trace_timeline: no window between '{a.between}' events from window {a.first}",
              file=sys.stderr)
        return 1
    print(f"{len(events)} events, {len(procs)} processes, {len(spans)} windows between "
          f"'{a.between}' (median {statistics.median((b - s) / 1e3 for s, b in spans):.1f} us)")
    gaps = {}
    times = [e[0] for e in events]
    for k, (start, end) in enumerate(spans):
        inside = events[bisect.bisect_left(times, start):bisect.bisect_left(times, end)]
        if k < a.show:
            print(f"\nwindow {k}: {(end - start) / 1e3:.1f} us")
            for ns, pid, tid, what, ident in inside:
                print(f"  {(ns - start) / 1e3:9.1f}  {threads[(pid, tid)]:8} {what} {ident or ''}")
        per = {}
        # The window's end counts as an event: the gap after its last step.
        bounded = inside + [(end, inside[-1][1] if inside else 0, 0, f"(next {a.between})", 0)]
        for prev, cur in zip(bounded, bounded[1:]):
            key = f"{prev[3]}@{procs[prev[1]]} -> {cur[3]}@{procs[cur[1]]}"
            per[key] = per.get(key, 0) + (cur[0] - prev[0]) / 1e3
        for key, us in per.items():
            gaps.setdefault(key, []).append(us)
    n = len(spans)
    rows = sorted(((sum(v) / n, statistics.median(v), len(v), key) for key, v in gaps.items()),
                  reverse=True)
    print(f"\nwhere the time goes (gap before an event, per window: mean over all {n} windows, "
          "median where it occurs, windows with it):")
    for mean, median, count, key in rows[:a.top]:
        print(f"  {mean:8.1f} us  {median:8.1f} us  {count:4d}  {key}")
    if a.step:
        skip = cutter(events, a.between) if a.step_elsewhere else None
        report_step(events, times, spans, a.step, skip)
    return 0


def report_step(events, times, spans, step, skip_pid=None):
    rows = []
    for start, end in spans:
        inside = events[bisect.bisect_left(times, start):bisect.bisect_left(times, end)]
        at = next(((e[0] - start) / 1e3 for e in inside if e[3] == step and e[1] != skip_pid),
                  None)
        if at is not None:
            rows.append(((end - start) / 1e3, at))
    print(f"\nper window: its length, when '{step}' first happens in it, "
          "the length less that (us):")
    if len(rows) < 2:
        print(f"  '{step}' in {len(rows)} window(s): nothing to compare")
        return
    for length, at in rows:
        print(f"  {length:9.1f}  {at:7.1f}  {length - at:9.1f}")
    rest = [length - at for length, at in rows]
    steps = [at for _, at in rows]
    lengths = [length for length, _ in rows]
    # The slope: how many us of the window each us of the step costs (1: all of it).
    # The length contains the step, so their correlation leans positive by itself; the
    # step's correlation with the rest does not.
    mx = statistics.mean(steps)
    sxx = sum((x - mx) ** 2 for x in steps)
    slope = (sum((x - mx) * (y - statistics.mean(lengths)) for x, y in zip(steps, lengths)) / sxx
             if sxx > 0 else float("nan"))
    missing = len(spans) - len(rows)
    print(f"  {len(rows)} windows ({missing} without '{step}'): '{step}' at "
          f"{min(steps):.1f}-{max(steps):.1f} us, the rest {min(rest):.1f}-{max(rest):.1f} us "
          f"(mean {statistics.mean(rest):.1f}); the length's slope on the step {slope:.2f}, "
          f"correlation {correlation(lengths, steps):.2f}; the rest's correlation with the step "
          f"{correlation(steps, rest):.2f}")


def correlation(xs, ys):
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
