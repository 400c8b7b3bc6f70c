"""The compiled NorMuon update's reduction kernels in a step_profile trace: per kernel name and launch grid, its
launches and mean duration. A grid of one block per matrix is a full-matrix norm that Inductor did not split.
Usage: reduction_kernels.py TRACE.json.gz"""
import collections
import gzip
import json
import sys

events = json.load(gzip.open(sys.argv[1]))["traceEvents"]
kernels = collections.defaultdict(list)
for e in events:
    if e.get("cat") == "kernel" and e["name"].startswith("triton_red") and "linalg_vector_norm" in e["name"]:
        kernels[e["name"], tuple(e["args"]["grid"]), tuple(e["args"]["block"])].append(e["dur"])
print("| kernel | grid | block | launches | mean µs |\n|---|---:|---:|---:|---:|")
for (name, grid, block), durations in sorted(kernels.items(), key=lambda kv: -sum(kv[1])):
    print(f"| `{name}` | {grid[0]} | {block[0]} | {len(durations)} | {sum(durations) / len(durations):,.0f} |")
