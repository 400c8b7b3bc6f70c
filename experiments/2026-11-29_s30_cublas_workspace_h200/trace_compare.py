"""Session 30's trace analysis: python3 trace_compare.py STEPS BASE_DIR OTHER_DIR
Each DIR holds one step_profile trace (*.json.gz) of STEPS profiled steps. Prints, per trace and per step: its
kernels, memsets and the GPU's idle time (step_profile.idle_gaps) split into gaps beside a memset and other gaps;
then the kernels whose time per step changed most between the two traces."""
import collections
import glob
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.step_profile import idle_gaps, short_name  # noqa: E402


def gpu_events(folder):
    """(name, start, end) in microseconds of each kernel, memset and copy on the GPU."""
    trace = json.load(gzip.open(glob.glob(f"{folder}/*.json.gz")[0]))
    return [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]


def summary(events, steps):
    """Per step: events, memsets, memset ms, ms of gaps beside a memset, ms of other gaps."""
    gaps = idle_gaps(events, steps, top=len(events))
    memsets = [end - start for name, start, end in events if name.startswith("Memset")]
    beside = sum(ms for ms, _, before, after in gaps if before.startswith("Memset") or after.startswith("Memset"))
    return (len(events) / steps, len(memsets) / steps, sum(memsets) / steps / 1e3, beside,
            sum(ms for ms, *_ in gaps) - beside)


def by_kernel(events, steps):
    times = collections.defaultdict(float)
    for name, start, end in events:
        times[short_name(name)] += (end - start) / steps
    return times


if __name__ == "__main__":
    steps, folders = int(sys.argv[1]), sys.argv[2:4]
    events = [gpu_events(f) for f in folders]
    print("| trace | events a step | memsets a step | memset ms | gaps beside memsets, ms | other gaps, ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for folder, evs in zip(folders, events):
        n, memsets, *ms = summary(evs, steps)
        print(f"| {folder} | {n:.0f} | {memsets:.0f} | " + " | ".join(f"{v:.2f}" for v in ms) + " |")
    base, other = (by_kernel(evs, steps) for evs in events)
    changes = sorted(set(base) | set(other), key=lambda k: -abs(other.get(k, 0) - base.get(k, 0)))
    print("\n| kernel | base us a step | other us a step |\n|---|---:|---:|")
    for name in changes[:16]:
        print(f"| `{name}` | {base.get(name, 0):.1f} | {other.get(name, 0):.1f} |")
