"""Session 30's trace analysis: python3 trace_compare.py STEPS BASE_DIR OTHER_DIR
Each DIR holds one step_profile trace (*.json.gz) of STEPS profiled steps. Prints, per trace and per step: its
kernels, memsets and the GPU's idle time split into gaps beside a memset and other gaps; then the kernels whose
time per step changed most between the two traces."""
import collections
import glob
import gzip
import json
import sys


def gpu_events(folder):
    trace = json.load(gzip.open(glob.glob(f"{folder}/*.json.gz")[0]))
    return sorted((e for e in trace["traceEvents"] if e.get("ph") == "X"
                   and e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")), key=lambda e: e["ts"])


def summary(events, steps):
    beside = other = 0.0
    end = events[0]["ts"]
    for before, after in zip(events, events[1:]):
        end = max(end, before["ts"] + before["dur"])
        gap = max(0.0, after["ts"] - end)
        if "gpu_memset" in (before["cat"], after["cat"]):
            beside += gap
        else:
            other += gap
    memsets = [e for e in events if e["cat"] == "gpu_memset"]
    return (len(events) / steps, len(memsets) / steps, sum(e["dur"] for e in memsets) / steps / 1e3,
            beside / steps / 1e3, other / steps / 1e3)


def by_kernel(events, steps):
    times = collections.defaultdict(float)
    for e in events:
        times[e["name"][:90]] += e["dur"] / steps
    return times


if __name__ == "__main__":
    steps, folders = int(sys.argv[1]), sys.argv[2:4]
    events = [gpu_events(f) for f in folders]
    print("| trace | events a step | memsets a step | memset ms | gaps beside memsets, ms | other gaps, ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for folder, evs in zip(folders, events):
        print(f"| {folder} | " + " | ".join(f"{v:.2f}" if i > 1 else f"{v:.0f}" for i, v in enumerate(summary(evs, steps))) + " |")
    base, other = (by_kernel(evs, steps) for evs in events)
    changes = sorted(set(base) | set(other), key=lambda k: -abs(other.get(k, 0) - base.get(k, 0)))
    print("\n| kernel | base us a step | other us a step |\n|---|---:|---:|")
    for name in changes[:16]:
        print(f"| `{name}` | {base.get(name, 0):.1f} | {other.get(name, 0):.1f} |")
