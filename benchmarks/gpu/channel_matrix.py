#!/usr/bin/env python3
"""The channel every ordered pair of workers used, as a matrix, from one `rpcjob run`.

Usage: channel_matrix.py RUN_DIR [--require CHANNEL,...]

RUN_DIR is `rpcjob run --run-dir`'s folder of a job whose workers all sent to each other
(`rpcjob-worker send --every-rank`): its assignment.yaml gives each worker's GPUs, and each
WORKER.metrics file (the worker's final metrics) the bytes it sent, by peer and channel
(rpcjob_channel_bytes_total, direction="send"). A row is the sender, a column the receiver;
a cell names the channel(s) that carried the row's bytes to that peer.

Exit status: 0 when every off-diagonal cell carried bytes and, with --require, only by the
channels listed; 1 otherwise (each bad cell is named on stderr); 2 for a run folder that
cannot be read.
"""
import argparse
import os
import re
import sys

WORKER = re.compile(r"\{name: ([^,}]+),.*?gpus: \[([^\]]*)\]")
BYTES = re.compile(r'^rpcjob_channel_bytes_total\{([^}]*)\} (\S+)$', re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def workers(run_dir):
    """[(name, [gpu, ...])] in the assignment's order (rank order)."""
    with open(os.path.join(run_dir, "assignment.yaml")) as f:
        text = f.read()
    found = [(m.group(1).strip(), [g.strip() for g in m.group(2).split(",") if g.strip()])
             for m in WORKER.finditer(text)]
    if not found:
        raise ValueError(f"{run_dir}/assignment.yaml names no workers")
    return found


def sent(path):
    """{peer: {channel: bytes}} of what the worker whose metrics file this is sent."""
    out = {}
    with open(path) as f:
        text = f.read()
    for m in BYTES.finditer(text):
        labels = dict(LABEL.findall(m.group(1)))
        if labels.get("direction") != "send" or "peer" not in labels:
            continue
        by = out.setdefault(labels["peer"], {})
        channel = labels.get("channel", "?")
        by[channel] = by.get(channel, 0) + float(m.group(2))
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--require", default="", help="channels every pair must use, comma-separated")
    a = p.parse_args(argv)
    required = {c for c in a.require.split(",") if c}
    try:
        ws = workers(a.run_dir)
        traffic = {name: sent(os.path.join(a.run_dir, name + ".metrics")) for name, _ in ws}
    except (OSError, ValueError) as e:
        print(f"channel_matrix: {e}", file=sys.stderr)
        return 2

    def head(name, gpus):
        return f"{name} (GPU {','.join(gpus)})" if gpus else f"{name} (cpu)"

    print("| from \\ to | " + " | ".join(head(n, g) for n, g in ws) + " |")
    print("|---" * (len(ws) + 1) + "|")
    bad = []
    for name, gpus in ws:
        cells = []
        for peer, _ in ws:
            if peer == name:
                cells.append("-")
                continue
            used = {c: b for c, b in traffic[name].get(peer, {}).items() if b > 0}
            if not used:
                bad.append(f"{name} -> {peer}: no bytes sent")
            elif required and not set(used) <= required:
                bad.append(f"{name} -> {peer}: {', '.join(sorted(used))} (wanted only "
                           f"{', '.join(sorted(required))})")
            cells.append(", ".join(f"{c} {b / 2**20:.0f} MiB" for c, b in sorted(used.items()))
                         or "NONE")
        print(f"| {head(name, gpus)} | " + " | ".join(cells) + " |")
    for b in bad:
        print(f"channel_matrix: {b}", file=sys.stderr)
    pairs = len(ws) * (len(ws) - 1)
    print(f"\n{pairs - len(bad)} of {pairs} ordered pairs "
          + ("as required" if required else "carried bytes")
          + (f" ({', '.join(sorted(required))})" if required else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
