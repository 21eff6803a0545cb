"""The seed programs' benchmark table: examples/resnet-pipeline (ours, the master's
output under `rpcjob run`) beside the tutorial's PyTorch program
(resnet_pipeline_torch.py's JSON lines), per num_split, and the model split's
recipe lines. tests/gpu/run-all.sh runs both in the same run and calls this.

  python3 seeds_table.py OURS_PIPELINE.log TORCH_PIPELINE.jsonl [MODEL_SPLIT.log ...]
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
    a, b = ours(argv[1]), torch_runs(argv[2])
    print("ResNet50 pipeline (batch 120 of 3x128x128, 3 batches; time = building the model + the batches)\n")
    print("| num_split | ours (s) | ours (images/s) | PyTorch (s) | PyTorch (images/s) | "
          "PyTorch, spawn to join (s) | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for n in sorted(set(a) | set(b)):
        o, t = a.get(n), b.get(n)
        cells = [str(n),
                 f"{o[0]:.3f}" if o else "-", f"{o[1]:.1f}" if o else "-",
                 f"{t['master_s']:.3f}" if t else "-", f"{t['images_per_s']:.1f}" if t else "-",
                 f"{t['spawn_s']:.3f}" if t else "-",
                 f"{t['master_s'] / o[0]:.2f}x" if o and t else "-"]
        print("| " + " | ".join(cells) + " |")
    for path in argv[3:]:
        lines = [l.strip() for l in open(path, errors="replace")
                 if re.search(r"RPC (total execution time|gradients)", l)]
        if lines:
            print(f"\nmodel split ({path.split('/')[-1]}):\n")
            for l in lines:
                print(f"    {l}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
