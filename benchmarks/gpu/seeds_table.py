"""The seed programs' benchmark table: examples/resnet-pipeline (ours, the master's
output under `rpcjob run`) beside the tutorial's PyTorch program
(resnet_pipeline_torch.py's JSON lines), per num_split, and the model split's
recipe lines. tests/gpu/run-all.sh runs both in the same run and calls this.

  python3 seeds_table.py OURS_PIPELINE.log TORCH_PIPELINE.jsonl [--fresh OURS_FRESH.log]
                         [MODEL_SPLIT.log ...]

The tutorial spawns fresh processes for every num_split, so each of its figures
pays the first iteration's warm-up (cuDNN and cuBLAS handles, kernel loading, the
caching allocator's growth). OURS_FRESH.log holds ours run the same way (one
`rpcjob run` per num_split): the speed-up is computed on it. OURS_PIPELINE.log is
one job running every num_split in turn (only the first pays the warm-up), shown
beside it.

The tutorial's own printed figure is mp.spawn to join: process start, init_rpc,
building the model, the batches and shutdown. run-all.sh times each fresh
`rpcjob run` the same way, launch to exit ("job wall time" lines in
OURS_FRESH.log); the second table sets the two side by side.
"""
import json
import re
import sys


def ours(path):
    out = {}
    for line in open(path, errors="replace"):
        m = re.search(r"number of splits = (\d+), execution time = ([0-9.]+) \(([0-9.]+) images/s\)", line)
        if m:
            out[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return out


def wall_times(path):
    out = {}
    for line in open(path, errors="replace"):
        m = re.search(r"job wall time: number of splits = (\d+), launch to exit = ([0-9.]+) s", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def torch_runs(path):
    out = {}
    for line in open(path, errors="replace"):
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("bench") == "resnet_pipeline":
                out[r["num_split"]] = r
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    rest = argv[3:]
    fresh, walls = {}, {}
    if len(rest) >= 2 and rest[0] == "--fresh":
        fresh, walls, rest = ours(rest[1]), wall_times(rest[1]), rest[2:]
    a, b = ours(argv[1]), torch_runs(argv[2])
    print("ResNet50 pipeline (batch 120 of 3x128x128, 3 batches; time = building the model + the batches)\n")
    print("| num_split | ours, a job per num_split (s) | ours (images/s) | ours, one job for all (s) "
          "| PyTorch, fresh processes per num_split (s) | PyTorch (images/s) | "
          "PyTorch, spawn to join (s) | speed-up, both fresh | speed-up, ours one job |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sorted(set(a) | set(b) | set(fresh)):
        f, o, t = fresh.get(n), a.get(n), b.get(n)
        cells = [str(n),
                 f"{f[0]:.3f}" if f else "-", f"{f[1]:.1f}" if f else "-",
                 f"{o[0]:.3f}" if o else "-",
                 f"{t['master_s']:.3f}" if t else "-", f"{t['images_per_s']:.1f}" if t else "-",
                 f"{t['spawn_s']:.3f}" if t else "-",
                 f"{t['master_s'] / f[0]:.2f}x" if f and t else "-",
                 f"{t['master_s'] / o[0]:.2f}x" if o and t else "-"]
        print("| " + " | ".join(cells) + " |")
    if walls:
        print("\nAs the tutorial prints it: the whole program per num_split (ours: `rpcjob run` launch to "
              "exit; PyTorch: mp.spawn to join), fresh processes on both sides\n")
        print("| num_split | ours, launch to exit (s) | ours (images/s) | PyTorch, spawn to join (s) "
              "| PyTorch (images/s) | speed-up |")
        print("|---|---|---|---|---|---|")
        for n in sorted(walls):
            t = b.get(n)
            # The images of a run: PyTorch's master time times its rate (batch x batches).
            images = t["images_per_s"] * t["master_s"] if t else None
            cells = [str(n), f"{walls[n]:.3f}", f"{images / walls[n]:.1f}" if t else "-",
                     f"{t['spawn_s']:.3f}" if t else "-",
                     f"{images / t['spawn_s']:.1f}" if t else "-",
                     f"{t['spawn_s'] / walls[n]:.2f}x" if t else "-"]
            print("| " + " | ".join(cells) + " |")
    for path in rest:
        lines = [l.strip() for l in open(path, errors="replace")
                 if re.search(r"RPC (total execution time|gradients)", l)]
        if lines:
            print(f"\nmodel split ({path.split('/')[-1]}):\n")
            for l in lines:
                print(f"    {l}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
