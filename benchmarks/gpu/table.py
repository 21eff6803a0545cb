"""Prints the GPU benchmark table (markdown) from bench.jsonl and the CPU bench's JSON."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
print("| implementation | channel cuda:0->cuda:1 | small CUDA call p50 / p99 (us) | 4 MB CUDA round trip (ms) "
      "| 400 MB CUDA round trip (ms) | 400 MB effective (GB/s) | model split, 10 fwd (s) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['impl']} | {r['channel']} | {r['small_p50_us']} / {r['small_p99_us']} | {r['rt4mb_ms']} "
          f"| {r['rt400mb_ms']} | {r['rt400mb_gbs']} | {r['model_split_s']} |")
if len(sys.argv) > 2:
    try:
        print("\nCPU rpcjob-bench --json (same run):\n")
        print("```json\n" + open(sys.argv[2]).read().strip()[:3000] + "\n```")
    except OSError as e:
        print(f"(no CPU bench: {e})")
