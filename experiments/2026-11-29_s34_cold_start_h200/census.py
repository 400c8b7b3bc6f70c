"""Session 34: kernels per profiled step of a step_profile trace, by name: count and GPU time per step (from the third step),
and the kernels' count by phase (the trace's user annotations that enclose them, if any). Run from scratch/ or here:

    python3 census.py traces/step_profile_rank0.json.gz
"""
import collections, gzip, json, sys
from pathlib import Path
sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "train_gpt.py").exists())))
from benchmarks.step_profile import short_name  # noqa: E402

trace = json.load(gzip.open(sys.argv[1]))
events = trace["traceEvents"]
kernels = [(e["name"], e["ts"], e["ts"] + e["dur"]) for e in events
           if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
               and e.get("cat") == "gpu_user_annotation" and e["name"] == "train_step" and e["dur"] > 10000)
notes = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("ph") == "X"
               and e.get("cat") == "gpu_user_annotation" and e["name"] != "train_step")
used = steps[2:] or steps
count, time = collections.Counter(), collections.Counter()
phase = collections.Counter()
for t0, t1 in used:
    for name, start, end in kernels:
        if t0 <= start < t1:
            key = short_name(name, 70)
            count[key] += 1
            time[key] += end - start
            inside = [n for a, b, n in notes if a <= start < b]
            phase[inside[-1] if inside else "-"] += 1
n = len(used)
print(f"{n} steps; kernels per step {sum(count.values()) / n:.0f}, GPU time per step {sum(time.values()) / n / 1000:.2f} ms")
print("by annotation:", {k: round(v / n) for k, v in phase.most_common()})
print(" per step   us/step  name")
for key, c in count.most_common(60):
    print(f"{c / n:9.1f} {time[key] / n:9.1f}  {key}")

# by launcher: the innermost CPU op or annotation around the runtime call that launched each kernel (a CUDA graph's
# kernels share its cudaGraphLaunch), and the kernels of each graph launch
runtime = {e["args"].get("correlation"): e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
           and "args" in e}
cpu = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and e.get("ph") == "X"]
launcher, per_launch = collections.defaultdict(lambda: [0, 0.0]), collections.defaultdict(collections.Counter)
for name, start, end, correlation in [(e["name"], e["ts"], e["ts"] + e["dur"], e["args"].get("correlation"))
                                      for e in events if e.get("ph") == "X"
                                      and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]:
    if not any(t0 <= start < t1 for t0, t1 in used):
        continue
    call = runtime.get(correlation)
    around = [e for e in cpu if call and e["ts"] <= call["ts"] <= e["ts"] + e["dur"] and e.get("tid") == call.get("tid")]
    inner = max(around, key=lambda e: e["ts"])["name"] if around else "-"
    key = (inner, call["name"] if call else "?")
    launcher[key][0] += 1
    launcher[key][1] += end - start
    if call and call["name"] == "cudaGraphLaunch":
        per_launch[inner][call["ts"]] += 1
print("\nby launcher: kernels per step, GPU us per step, (innermost CPU op, runtime call)")
for key, (c, us) in sorted(launcher.items(), key=lambda kv: -kv[1][0]):
    print(f"{c / n:8.1f} {us / n:9.1f}  {key}")
for inner, launches in per_launch.items():
    print(f"graph launches under {inner}: kernels each {sorted(launches.values())}")
