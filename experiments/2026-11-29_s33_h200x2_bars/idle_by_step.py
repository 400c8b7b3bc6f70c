"""Per profiled step of a step_profile trace, the GPU's idle time (gaps in the union of all its kernels, NCCL's
included) split by gap length (under 2 us, 2-10 us, 10 us or more), by 2-ms slice of the step, and the longest
gaps with the kernels on either side. Session 33: stage 0 on 2 H200s idles 0.65-0.76 ms a step, of it 0.4 ms in
the ~0.4-us gaps between 1,040-1,120 kernels and the most of the rest in the step's last 6 ms (the optimizers).

    python3 idle_by_step.py TRACE.json.gz
"""
import collections
import gzip
import json
import sys

trace = json.load(gzip.open(sys.argv[1]))
events = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in
                 ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
steps = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "gpu_user_annotation"
                and e["name"] == "train_step" and e["dur"] > 10000), key=lambda e: e["ts"])
for step in steps[2:]:  # as step_profile: the first round starts on a drained queue
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    end, before, gaps = None, None, []
    for e in events:
        if e["ts"] + e["dur"] < t0 or e["ts"] > t1:
            continue
        if end is not None and e["ts"] > end:
            gaps.append((e["ts"] - end, end - t0, before, e["name"]))
        if end is None or e["ts"] + e["dur"] > end:
            end, before = e["ts"] + e["dur"], e["name"]
    idle = sum(g[0] for g in gaps)
    by_slice = collections.Counter()
    for length, at, _, _ in gaps:
        by_slice[int(at // 2000) * 2] += length
    print(f"step {step['dur']:.0f} us: idle {idle:.0f} us ({idle / step['dur']:.1%}) in {len(gaps)} gaps; under 2 us "
          f"{sum(g[0] for g in gaps if g[0] < 2):.0f}, 2-10 us {sum(g[0] for g in gaps if 2 <= g[0] < 10):.0f}, "
          f"10 us or more {sum(g[0] for g in gaps if g[0] >= 10):.0f}")
    print("   by 2-ms slice (ms: us idle):", {k: round(v) for k, v in sorted(by_slice.items())})
    for length, at, left, right in sorted(gaps, key=lambda g: -g[0])[:4]:
        print(f"     at {at:8.0f} us: {length:5.0f} us  {left[:50]} -> {right[:50]}")
