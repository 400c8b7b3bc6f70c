"""Where a profiled stage's idle GPU time lies: the gaps in the union of all GPU work by length, and the kernels
per step by the optimizer range they ran in (step_profile.py's annotations; "forward and backward" for the rest).

    python3 kernel_counts.py TRACE.json.gz [--steps 6]

TRACE: a rank's trace from step_profile.py (its stage's profiled steps: 2 steps x --steps 3 = 6 by default).
"""
import argparse
import bisect
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.step_profile import kernel_kind, merge, optimizer_region  # noqa: E402

BUCKETS_US = (5, 20, 100)  # gap lengths: under 5 us, 5-20, 20-100, 100 and more


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--steps", type=int, default=6, help="the steps the trace holds")
    own = parser.parse_args()
    events = [e for e in json.load(gzip.open(own.trace))["traceEvents"] if e.get("ph") == "X"]
    work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    region = optimizer_region(events)

    busy = merge((e["ts"], e["ts"] + e["dur"]) for e in work)
    span = busy[-1][1] - busy[0][0]
    by_length, count = Counter(), Counter()
    for (_, end), (start, _) in zip(busy, busy[1:]):
        bucket = bisect.bisect_right(BUCKETS_US, start - end)
        by_length[bucket] += start - end
        count[bucket] += 1
    names = ["under 5 us", "5-20 us", "20-100 us", "100 us or more"]
    print(f"{own.trace}: {span / 1000 / own.steps:.2f} ms a step, GPU idle {sum(by_length.values()) / span:.1%}")
    print("| gaps | per step | ms per step | mean (us) |\n|---|---:|---:|---:|")
    for bucket, name in enumerate(names):
        if count[bucket]:
            print(f"| {name} | {count[bucket] / own.steps:.0f} | {by_length[bucket] / 1000 / own.steps:.3f} | "
                  f"{by_length[bucket] / count[bucket]:.1f} |")
    kernels = Counter(region(e["ts"]) or "forward and backward" for e in work if kernel_kind(e["name"]) != "nccl")
    print(f"\n| range | kernels per step |\n|---|---:|")
    for name, n in kernels.most_common():
        print(f"| {name} | {n / own.steps:.1f} |")
    print(f"| all | {sum(kernels.values()) / own.steps:.1f} |")


if __name__ == "__main__":
    main()
