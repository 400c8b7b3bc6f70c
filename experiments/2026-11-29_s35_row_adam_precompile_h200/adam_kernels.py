"""Session 35: the kernels inside one optimizer's GPU annotation (default Adam.start_step) in a step_profile trace:
the ranges' spans and the GPU's idle time inside them, then per kernel name and launch grid (blocks x threads),
count and GPU time per annotated range. Kernels are placed in ranges by step_profile's own optimizer_region.

    python3 adam_kernels.py traces/step_profile_rank0.json.gz [Adam.start_step]
"""
import collections
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "train_gpt.py").exists())))
from benchmarks.step_profile import optimizer_region  # noqa: E402

events = [e for e in json.load(gzip.open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
label = sys.argv[2] if len(sys.argv) > 2 else "Adam.start_step"
region = optimizer_region(events)
ranges = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                if e.get("cat") == "gpu_user_annotation" and e["name"] == label)
kernels = [(e["ts"], e["ts"] + e["dur"], e["name"][:90] + "  " + "x".join(
    str(e.get("args", {}).get(k, "-")) for k in ("grid", "block"))) for e in events
    if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and region(e["ts"]) == label]
count, time = collections.Counter(), collections.Counter()
for t0, t1 in ranges:
    inside = [(a, b, n) for a, b, n in kernels if t0 <= a < t1]
    busy = sum(b - a for a, b, _ in inside)
    print(f"range {t1 - t0:8.1f} us, {len(inside)} kernels, busy {busy:8.1f} us, idle {t1 - t0 - busy:8.1f} us")
    for a, b, n in inside:
        count[n] += 1
        time[n] += b - a
print(" per range   us/range  name")
for name, c in time.most_common(25):
    print(f"{count[name] / len(ranges):9.1f} {c / len(ranges):9.1f}  {name}")
