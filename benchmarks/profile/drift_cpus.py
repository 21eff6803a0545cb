"""Where the two bench processes' threads ran during each async round (issue 22: one
process pair's async rate jumps between ~0.9 M and ~1.5 M calls/s from round to round).

Usage: python3 drift_cpus.py ROUNDS_FILE PID...
Samples every thread of PID... (each thread's name and the CPU it last ran on,
/proc/PID/task/TID/stat) every 2 ms until the first PID exits, then reads ROUNDS_FILE
(rpcjob-bench's stderr with RPCJOB_BENCH_ASYNC_ROUNDS: "async round N: RATE calls/s
START END", steady-clock seconds) and prints per round its rate and, of the samples in
it, how often the caller's main thread shared its CPU with another running thread of
either process (a lane poller, a TensorPipe reactor), and with which.
"""
import collections
import os
import re
import sys
import time

BUSY = ("rpcjob_lane", "TP_SHM_reactor")


def threads(pid):
    """{tid: (name, cpu, state)} of a live process, {} once it is gone."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        # field 3 the state (R: running or runnable), field 39 the CPU it last ran on
        out[int(tid)] = (name, int(fields[36]), fields[0])
    return out


def main():
    rounds_file, pids = sys.argv[1], [int(p) for p in sys.argv[2:]]
    caller = pids[-1]  # the caller's main thread has the process's own id
    samples = []  # (time, {tid: (pid, name, cpu)})
    while os.path.exists(f"/proc/{pids[0]}") and os.path.exists(f"/proc/{caller}"):
        now = time.monotonic()
        seen = {}
        for pid in pids:
            for tid, (name, cpu, state) in threads(pid).items():
                seen[tid] = (pid, name, cpu, state)
        samples.append((now, seen))
        time.sleep(0.002)
    rounds = []
    with open(rounds_file) as f:
        for line in f:
            m = re.match(r"async round (\d+): (\d+) calls/s ([\d.]+) ([\d.]+)", line)
            if m:
                rounds.append((int(m[1]), int(m[2]), float(m[3]), float(m[4])))
    print("round  calls/s  samples  shared  with  |  CPUs (most seen): caller, its lane poller, "
          "the server's lane poller")
    for n, rate, start, end in rounds:
        inside = [s for t, s in samples if start <= t <= end]
        shared = 0
        partners = collections.Counter()
        where = collections.defaultdict(collections.Counter)  # role -> CPU -> samples
        for s in inside:
            for tid, (pid, name, c, state) in s.items():
                if tid == caller:
                    where["caller"][c] += 1
                elif name.startswith("rpcjob_lane"):
                    where["caller lane" if pid == caller else "server lane"][c] += 1
            if caller not in s:
                continue
            cpu = s[caller][2]
            mates = [f"{'caller' if pid == caller else 'server'}.{name}"
                     for tid, (pid, name, c, state) in s.items()
                     if tid != caller and c == cpu and state == "R" and name.startswith(BUSY)]
            if mates:
                shared += 1
                partners.update(mates)
        cpus = " ".join(str(where[r].most_common(1)[0][0]) if where[r] else "-"
                        for r in ("caller", "caller lane", "server lane"))
        print(f"{n:5d}  {rate:7d}  {len(inside):7d}  {shared:6d}  "
              f"{', '.join(f'{k} {v}' for k, v in partners.most_common(3))}  |  {cpus}")


if __name__ == "__main__":
    main()
