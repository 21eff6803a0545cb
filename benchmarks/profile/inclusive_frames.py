"""Inclusive time per function on the busy threads of a `perf record -g` profile, for
steps too short to show among a polling loop's samples (issue 20: the 400 MB round
trip's host steps are ~3 % of its reactor threads' samples).

Usage: perf script -i DATA -F tid,ip,sym | python3 inclusive_frames.py HZ ITERATIONS [REGEX]
(a `perf record -g` profile: frame-pointer stacks, which break in code built without frame
pointers, so the times are lower bounds)

Per thread: its samples, then every function whose name matches REGEX (default: ours,
TensorPipe's, c10/ATen's and the CUDA runtime's and driver's entry points) with the
samples that have it anywhere on their stack, as microseconds per iteration
(samples / HZ / ITERATIONS). A function in every sample (the loop itself) is left out.
"""
import collections
import re
import sys

DEFAULT = (r"rpcjob::|tensorpipe::(?!.*(Reactor|BusyPollingLoop|EventLoop))|c10::|at::"
           r"|^cuda[A-Z]\w*$|^cu[A-Z]\w*$|malloc|free")


def samples(lines):
    """Yields (tid, [symbol, ...]) per sample of `perf script -F tid,sym`."""
    tid, stack = None, []
    for line in lines:
        if not line.strip():
            if tid is not None:
                yield tid, stack
            tid, stack = None, []
        elif not line.startswith("\t"):  # " TID": a sample; its frames follow, tab-indented
            tid, stack = line.split()[0], []
        else:
            parts = line.split(None, 1)  # "ADDRESS SYMBOL"
            stack.append(parts[1].strip() if len(parts) == 2 else "")
    if tid is not None:
        yield tid, stack


def main():
    hz, iterations = float(sys.argv[1]), float(sys.argv[2])
    wanted = re.compile(sys.argv[3] if len(sys.argv) > 3 else DEFAULT)
    total = collections.Counter()
    inclusive = collections.defaultdict(collections.Counter)
    for tid, stack in samples(sys.stdin):
        total[tid] += 1
        for symbol in set(stack):
            if wanted.search(symbol):
                inclusive[tid][symbol] += 1
    us = 1e6 / hz / iterations
    for tid, n in total.most_common(6):
        print(f"## thread {tid}: {n} samples ({n * us:.1f} us per iteration)")
        shown = 0
        for symbol, k in inclusive[tid].most_common():
            if k >= 0.9 * n:
                continue  # the thread's loop, in (nearly) every sample
            print(f"  {k * us:8.2f} us  {k:6d}  {symbol[:150]}")
            shown += 1
            if shown >= 40:
                break


if __name__ == "__main__":
    main()
