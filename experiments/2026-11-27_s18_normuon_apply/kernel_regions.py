"""GPU time per step of two step_profile traces, one GPU against two, by the optimizer step a kernel runs in
(NorMuon, Adam, RowAdam, their zero_grad; anything else counts as the forward and backward pass) and by kernel:
which work does not halve on two GPUs. NCCL kernels are left out. Usage:
kernel_regions.py ONE_GPU_TRACE TWO_GPU_TRACE [STEPS] (rank 0's traces of the same stage, STEPS steps each, 6 by
default: step_profile's --trace_stage)."""
import collections
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.step_profile import kernel_kind, optimizer_region, short_name  # noqa: E402


def per_step(path, steps):
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    optimizer = optimizer_region(events)
    by_region, by_kernel = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or kernel_kind(e["name"]) == "nccl":
            continue
        region = optimizer(e["ts"]) or "forward and backward"
        by_region[region] += e["dur"] / 1000 / steps
        by_kernel[region, short_name(e["name"], 50)] += e["dur"] / 1000 / steps
    return by_region, by_kernel


steps = int(sys.argv[3]) if len(sys.argv) > 3 else 6
(one, one_kernels), (two, two_kernels) = per_step(sys.argv[1], steps), per_step(sys.argv[2], steps)
print("| region | one GPU, half (ms a step) | two GPUs (ms a step) | extra |\n|---|---:|---:|---:|")
for region in sorted(set(one) | set(two), key=lambda r: -two[r]):
    print(f"| {region} | {one[region] / 2:.2f} | {two[region]:.2f} | {two[region] - one[region] / 2:+.2f} |")
print(f"| all | {sum(one.values()) / 2:.2f} | {sum(two.values()):.2f} | "
      f"{sum(two.values()) - sum(one.values()) / 2:+.2f} |")
print("\n| region | kernel | one GPU (ms a step) | two GPUs | extra over half |\n|---|---|---:|---:|---:|")
extra = {k: two_kernels[k] - one_kernels[k] / 2 for k in set(one_kernels) | set(two_kernels)}
for key, value in sorted(extra.items(), key=lambda kv: -kv[1])[:20]:
    print(f"| {key[0]} | `{key[1]}` | {one_kernels[key]:.3f} | {two_kernels[key]:.3f} | {value:+.3f} |")
