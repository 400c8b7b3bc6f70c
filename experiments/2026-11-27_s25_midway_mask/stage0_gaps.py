"""The GPU's idle gaps in a trace that benchmarks/step_profile.py exported (traces/step_profile_rank0.json.gz), with
step_profile's own pieces: the steps from the one after the first round on (measured_from), the gaps by the
kernel before and after (idle_gaps) and the optimizer's ranges (optimizer_region). What this adds: kernels grouped
into families (every variant of a cuBLAS GEMM as one, a memset as one), so that a cause spread over many kernel
names shows as one row, and the idle time by optimizer range. Session 25: stage 0 of main at 98304 tokens on
2 x H100.

    python3 stage0_gaps.py TRACE.json.gz"""
import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import step_profile  # noqa: E402

FAMILIES = [(r"^ncclDevKernel_(\w+?)_.*", r"nccl \1"), (r"^nvjet.*", "nvjet gemm"), (r"^Memset.*", "memset"),
            (r"^Memcpy (\w+).*", r"memcpy \1"), (r"^triton_\w*?_fused_(\w{0,40}).*", r"triton \1"),
            (r"^void at::native::(\w+).*", r"at::\1")]


def family(name):
    for pattern, replacement in FAMILIES:
        if re.match(pattern, name):
            return re.sub(pattern, replacement, name)
    return step_profile.short_name(name, width=60)


def main(path):
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "gpu_user_annotation" and e["name"] == "train_step"]
    per_stream = Counter(stream for stream, _, _ in steps)
    profiled = max(per_stream.values())
    skip = profiled // 3  # step_profile runs each of a stage's step numbers --steps (3) times
    start = step_profile.measured_from(steps, profiled, skip)
    measured = profiled - skip
    kernels = [(e["name"], max(e["ts"], start), e["ts"] + e["dur"]) for e in events
               if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and e["ts"] + e["dur"] > start]
    covered = step_profile.merge([(s, e) for _, s, e in kernels])
    region, by_region = step_profile.optimizer_region(events), Counter()
    for (_, end), (next_start, _) in zip(covered, covered[1:]):
        by_region[region(end) or "forward/backward"] += (next_start - end) / measured
    span = (covered[-1][1] - covered[0][0]) / measured
    idle = sum(by_region.values())
    print(f"steps measured {measured}, {span:.0f} us a step, idle {idle:.0f} us a step ({100 * idle / span:.1f} %)")
    print("idle by region, us a step:", {name: round(us) for name, us in by_region.most_common()})
    print("| before | after | gaps a step | idle us a step |")
    for ms, gaps, before, after in step_profile.idle_gaps([(family(n), s, e) for n, s, e in kernels], measured, 15):
        print(f"| {before} | {after} | {gaps:.1f} | {1000 * ms:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
