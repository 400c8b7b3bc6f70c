"""Session 33's readings of a step_profile trace (traces/step_profile_rank<r>.json.gz), per profiled step (its GPU
range, "train_step"):
- exposed: each NCCL kernel's exposed time (step_profile.exposed_time against every other kernel), its start in
  the step and its name, where more than 3 us. Every Adam step of stage 0 on 2 H200s ended on Adam's all-gathers,
  exposed, because the next step's n-gram rows' exchange (a synchronous NCCL all-to-all on the compute stream)
  waited behind them;
- idle: the gaps in the union of all the GPU's kernels (step_profile.merge), by length (under 2 us, 2-10 us,
  10 us or more) and by 2-ms slice of the step, the first two steps left out as step_profile leaves them. Stage 0
  idled 0.65-0.76 ms a step, 0.4 ms of it in the ~0.4-us gaps between about 1,100 kernels.

    python3 read_trace.py TRACE.json.gz
"""
import collections
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.step_profile import exposed_time, merge, short_name  # noqa: E402

trace = json.load(gzip.open(sys.argv[1]))
kernels = [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
           if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"] if e.get("ph") == "X"
               and e.get("cat") == "gpu_user_annotation" and e["name"] == "train_step" and e["dur"] > 10000)
compute = merge((start, end) for name, start, end in kernels if "nccl" not in name.lower())
busy = merge((start, end) for _, start, end in kernels)

print("exposed NCCL per step, and each NCCL kernel exposed more than 3 us: (start in the step, us exposed, name)")
for t0, t1 in steps:
    exposed = [(start - t0, exposed_time([(start, end)], compute), name) for name, start, end in kernels
               if "nccl" in name.lower() and t0 <= start < t1]
    print(f"step at {t0 - steps[0][0]:.0f} us, {t1 - t0:.0f} us long: exposed {sum(e for _, e, _ in exposed):.0f} us")
    for start, us, name in exposed:
        if us > 3:
            print(f"    {start:8.0f} {us:6.0f}  {short_name(name, 50)}")

print("\nidle per step, from the third: gaps by length, by 2-ms slice (ms: us), the longest")
for t0, t1 in steps[2:]:
    inside = [(start, end) for start, end in busy if end > t0 and start < t1]
    gaps = [(later - earlier, earlier - t0) for (_, earlier), (later, _) in zip(inside, inside[1:])]
    by_slice = collections.Counter()
    for length, at in gaps:
        by_slice[int(at // 2000) * 2] += length
    idle = sum(length for length, _ in gaps)
    print(f"step {t1 - t0:.0f} us: idle {idle:.0f} us ({idle / (t1 - t0):.1%}) in {len(gaps)} gaps; under 2 us "
          f"{sum(g for g, _ in gaps if g < 2):.0f}, 2-10 us {sum(g for g, _ in gaps if 2 <= g < 10):.0f}, "
          f"10 us or more {sum(g for g, _ in gaps if g >= 10):.0f}")
    print("   ", {k: round(v) for k, v in sorted(by_slice.items())}, "longest at (us):",
          [(round(at), round(length)) for length, at in sorted(gaps, reverse=True)[:3]])
