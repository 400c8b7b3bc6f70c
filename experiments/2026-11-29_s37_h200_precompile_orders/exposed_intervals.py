"""Where a step_profile trace's exposed communication is: each NCCL kernel's time while no other kernel, copy or
memset runs, by kernel and by the host's range that launched it (an optimizer's half, annotated by step_profile,
or the training step outside them: the forward and backward passes, the n-gram rows' fetch), and each measured
step's largest exposed pieces with the kernel that ran next (what waited for them).

    python3 exposed_intervals.py traces/step_profile_rank0.json.gz [--skip 2] [--top 6]

--skip: the profiled steps left out, as step_profile leaves out its first round (its table's exposed share is
measured from the third profiled step when it profiles two step numbers). Session 37's question: what of stage 0's
1.3-1.4 % exposed share (2 H200s, the 8-GPU per-rank shape) is still there, and where in the step."""
import argparse
import bisect
import gzip
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.step_profile import WAIT_US, kernel_kind, merge, short_name  # noqa: E402

DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def idle_periods(compute):
    """The gaps in the union of the compute intervals, as (start, end), the time before the first and after the
    last included (step_profile's exposed_time)."""
    edges = [-math.inf] + [edge for interval in merge(compute) for edge in interval] + [math.inf]
    return list(zip(edges[::2], edges[1::2]))


def exposed_pieces(start, end, idle, idle_starts):
    """The parts of [start, end) in the idle periods, as (start, end, length of the idle period)."""
    i = max(bisect.bisect_right(idle_starts, start) - 1, 0)
    pieces = []
    while i < len(idle) and idle[i][0] < end:
        lo, hi = max(start, idle[i][0]), min(end, idle[i][1])
        if hi > lo:
            pieces.append((lo, hi, idle[i][1] - idle[i][0]))
        i += 1
    return pieces


def launch_ranges(events):
    """A function from a kernel event to the innermost host range (record_function) around its launch, by the
    launch's correlation id: "train_step" alone is the training step outside the optimizers' halves."""
    launched = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ranges = [(e["ts"], e["ts"] + e["dur"], e["name"].split("#")[-1]) for e in events
              if e.get("cat") == "user_annotation"]

    def launched_in(kernel):
        ts = launched.get(kernel.get("args", {}).get("correlation"))
        around = [r for r in ranges if ts is not None and r[0] <= ts <= r[1]]
        return max(around)[2] if around else "outside the steps"
    return launched_in


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--skip", type=int, default=2)
    parser.add_argument("--top", type=int, default=6)
    args = parser.parse_args()
    events = json.load(gzip.open(args.trace))["traceEvents"]
    launched_in = launch_ranges(events)
    work = sorted(((e["name"], e["ts"], e["ts"] + e["dur"], e) for e in events if e.get("cat") in DEVICE_WORK),
                  key=lambda w: w[1])
    by_stream = defaultdict(list)
    for e in events:
        if e.get("cat") == "gpu_user_annotation" and e["name"] == "train_step":
            by_stream[e["tid"]].append(e["ts"])
    # a step's range on each stream that ran its kernels; a stream that ran kernels in some steps only has fewer,
    # and pairing its ranges with the others' would mix steps: the streams with a range in every step decide
    most = max(map(len, by_stream.values()), default=0)
    step_starts = [min(starts) for starts in zip(*(sorted(s) for s in by_stream.values() if len(s) == most))]
    if len(step_starts) <= args.skip:
        sys.exit(f"{len(step_starts)} steps in the trace, {args.skip} to skip")
    bounds = step_starts[args.skip:] + [max(end for _, _, end, _ in work)]
    measured = len(bounds) - 1
    compute = [(name, s, e) for name, s, e, _ in work if kernel_kind(name) != "nccl" and e > bounds[0]]
    idle = idle_periods([(s, e) for _, s, e in compute])
    idle_starts = [s for s, _ in idle]
    compute_starts = [s for _, s, _ in compute]  # sorted, as work is

    totals = defaultdict(lambda: [0, 0.0, 0.0, 0.0])  # (kernel, range): launches, time, exposed, in waits
    per_step = defaultdict(list)
    for name, start, end, event in work:
        if kernel_kind(name) != "nccl" or end <= bounds[0] or start >= bounds[-1]:
            continue
        key = (short_name(name, 60), launched_in(event))
        pieces = exposed_pieces(start, end, idle, idle_starts)
        exposed = sum(hi - lo for lo, hi, _ in pieces)
        waited = sum(hi - lo for lo, hi, length in pieces if length >= WAIT_US)
        t = totals[key]
        t[0] += 1
        t[1] += end - start
        t[2] += exposed
        t[3] += waited
        for lo, hi, _ in pieces:
            step = min(max(bisect.bisect_right(bounds, lo) - 1, 0), measured - 1)
            after = bisect.bisect_left(compute_starts, hi)
            waiter = compute[after][0] if after < len(compute) else "none"
            per_step[step].append((hi - lo, lo - bounds[step], bounds[step + 1] - hi, key, short_name(waiter, 50)))

    step_us = (bounds[-1] - bounds[0]) / measured
    all_exposed = sum(t[2] for t in totals.values()) / measured
    print(f"{measured} steps measured, {step_us / 1000:.2f} ms a step; exposed {all_exposed:.1f} us a step "
          f"({all_exposed / step_us:.2%}), in waits of {WAIT_US:g} us or more "
          f"{sum(t[3] for t in totals.values()) / measured:.1f} us")
    print("| NCCL kernel | launched in | launches a step | us a step | exposed us a step | of it in waits |")
    print("|---|---|---:|---:|---:|---:|")
    for (name, where), (n, time, exposed, waited) in sorted(totals.items(), key=lambda item: -item[1][2]):
        print(f"| {name} | {where} | {n / measured:.1f} | {time / measured:.1f} | {exposed / measured:.1f} | "
              f"{waited / measured:.1f} |")
    for step in sorted(per_step):
        print(f"\nstep {step + args.skip}: the largest exposed pieces (us; from the step's start; to its end)")
        for length, since, until, (name, where), waiter in sorted(per_step[step], reverse=True)[: args.top]:
            print(f"  {length:7.1f}  +{since:8.1f}  -{until:8.1f}  {name} ({where}); next: {waiter}")


if __name__ == "__main__":
    main()
