"""Per profiled step of a step_profile trace (traces/step_profile_rank<r>.json.gz), the NCCL kernels that ran while
no other kernel did: each one's start in the step (us), its exposed time (us), its name and its exposed pieces of
more than 3 us (start in the step, length). Session 33 found with it that every Adam step of stage 0 on 2 H200s
ended on Adam's last all-gathers, exposed, because the next step's n-gram rows' exchange (a synchronous NCCL
all-to-all on the compute stream) waited behind them.

    python3 exposed_by_collective.py TRACE.json.gz
"""
import bisect
import gzip
import json
import sys

trace = json.load(gzip.open(sys.argv[1]))
events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in
                 ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
steps = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "gpu_user_annotation"
                and e["name"] == "train_step" and e["dur"] > 10000), key=lambda e: e["ts"])  # the GPU's ranges
compute = []
for start, end in sorted((e["ts"], e["ts"] + e["dur"]) for e in events if "nccl" not in e["name"].lower()):
    if compute and start <= compute[-1][1]:
        compute[-1][1] = max(compute[-1][1], end)
    else:
        compute.append([start, end])
starts = [start for start, _ in compute]


def uncovered(start, end):
    """The pieces of [start, end) that no compute kernel covers."""
    pieces, at = [], start
    i = max(bisect.bisect_right(starts, start) - 1, 0)
    while i < len(compute) and compute[i][0] < end:
        if compute[i][1] > at:
            if compute[i][0] > at:
                pieces.append((at, min(compute[i][0], end)))
            at = max(at, compute[i][1])
        i += 1
    return pieces + ([(at, end)] if at < end else [])


for step in steps:
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    rows, total = [], 0.0
    for e in events:
        if "nccl" in e["name"].lower() and t0 <= e["ts"] < t1:
            pieces = uncovered(e["ts"], e["ts"] + e["dur"])
            exposed = sum(b - a for a, b in pieces)
            total += exposed
            if exposed > 3:
                rows.append((round(e["ts"] - t0), round(exposed), e["name"][15:40],
                             [(round(a - t0), round(b - a)) for a, b in pieces if b - a > 3]))
    print(f"step at {t0 - steps[0]['ts']:.0f} us, {step['dur']:.0f} us long: exposed {total:.0f} us")
    for row in rows:
        print("   ", row)
