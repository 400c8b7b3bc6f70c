"""Where a step_profile trace's GPU waits with communication running: every gap of more than 30 us in the union of
the compute kernels (everything but NCCL), with the kernel before and after it, the NCCL kernels running during
it and the optimizer step it falls in; then the exposed time of each collective (NCCL running, no compute), by
kernel and optimizer. Usage: exposed_gaps.py traces/step_profile_rank0.json.gz"""
import bisect
import collections
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.step_profile import exposed_time, kernel_kind, merge, optimizer_region, short_name  # noqa: E402

trace = json.load(gzip.open(sys.argv[1]))
events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
optimizer = optimizer_region(events)
nccl = [e for e in kernels if kernel_kind(e["name"]) == "nccl"]
compute = [e for e in kernels if kernel_kind(e["name"]) != "nccl"]
busy = merge([(e["ts"], e["ts"] + e["dur"]) for e in compute])
compute_starts = [e["ts"] for e in compute]
origin = kernels[0]["ts"]


def optimizer_at(ts):
    return optimizer(ts) or "-"


def short(name):
    return short_name(name.replace("ncclDevKernel_", ""), 45)


print("| at (ms) | gap (us) | compute before | compute after | NCCL during (us) | in |\n|---:|---:|---|---|---|---|")
for (_, gap_start), (gap_end, _) in zip(busy, busy[1:]):
    if gap_end - gap_start <= 30:
        continue
    during = ", ".join(f"{short(e['name'])} {e['dur']:.0f}" for e in nccl
                       if e["ts"] < gap_end and e["ts"] + e["dur"] > gap_start)
    after = compute[bisect.bisect_left(compute_starts, gap_end)]["name"][:40]
    before = compute[bisect.bisect_left(compute_starts, gap_start) - 1]["name"][:40]
    print(f"| {(gap_start - origin) / 1000:.2f} | {gap_end - gap_start:.0f} | `{before}` | `{after}` | {during or '-'} | "
          f"{optimizer_at(gap_end)} |")

exposed, total, count = collections.Counter(), collections.Counter(), collections.Counter()
for e in nccl:
    key = (short(e["name"]), optimizer_at(e["ts"]))
    exposed[key] += exposed_time([(e["ts"], e["ts"] + e["dur"])], busy)
    total[key] += e["dur"]
    count[key] += 1
print("\n| collective | in | launches | time (ms) | exposed (ms) |\n|---|---|---:|---:|---:|")
for key, alone in exposed.most_common():
    print(f"| {key[0]} | {key[1]} | {count[key]} | {total[key] / 1000:.3f} | {alone / 1000:.3f} |")
