"""Where a start-up's time goes: train_gpt.main() in this process, then Dynamo's compile phases, every frame
Dynamo compiled (during which warm-up step, for how long, in which phase) with the sums per step, the kernels
Inductor autotuned, and AOTAutograd's and Inductor's cache counters. One GPU.

    python benchmarks/startup_profile.py [--cprofile] [any train_gpt flag]

Run it twice with the same --compile_cache, an empty directory first (cold), then again (warm); short runs
are enough: --scheduled_steps 30 --extension_steps 1 --val_loss_every 0. The log's start-up line splits each
run by phase. Give it the bytecode cache that train_gpt.py gives itself when run as a program (for
example PYTHONPYCACHEPREFIX=.bytecode, PYTHONDONTWRITEBYTECODE unset), or its imports compile torch's sources
again. This script imports Inductor before main(), which moves seconds from the log's "model" phase into
"imports": compare totals. Imported rather than run as a program, train_gpt keeps no bytecode of its own
(see its first lines). --cprofile adds Python's profile of the whole run, by cumulative and own time.
"""
import bisect
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import train_gpt  # noqa: E402  first: the log's "imports" phase starts with it and includes torch's import

import torch._inductor.config  # noqa: E402
import torch._inductor.runtime.triton_heuristics as heuristics  # noqa: E402
import torch._dynamo.utils  # noqa: E402
from torch._dynamo.utils import compile_times, counters  # noqa: E402


def record_autotuning(tuned):
    """Append (kernel, variants, seconds) to `tuned` for every kernel whose variants Inductor benchmarks."""
    benchmark = heuristics.CachingAutotuner.benchmark_all_configs

    def timed(self, *args, **kwargs):
        clock = time.perf_counter()
        result = benchmark(self, *args, **kwargs)
        tuned.append((self.inductor_meta.get("kernel_name"), len(self.launchers), time.perf_counter() - clock))
        return result
    heuristics.CachingAutotuner.benchmark_all_configs = timed


def record_steps(started):
    """Append (time, step) to `started` as each training step (warm-up or timed) is queued."""
    train_step = train_gpt.Run.train_step

    def recorded(self, step):
        started.append((time.time(), step))
        return train_step(self, step)
    train_gpt.Run.train_step = recorded


def print_frames(started):
    """Each frame Dynamo compiled: the step queued last before it began ('-' before the first: the model's
    build; validation's frames count under the step before it), its code, whether a forward graph, and its
    seconds: in all, in Dynamo (tracing, guards), in AOTAutograd, in Inductor (cache loads, on a warm start).
    Then the sums per step and the count."""
    times = [t for t, _ in started]
    print("frame  step  code  forward  total_s  dynamo_s  aot_s  inductor_s  guards  ops")
    by_step = {}
    for m in torch._dynamo.utils.get_compilation_metrics():
        i = bisect.bisect(times, (getattr(m, "start_time_us", None) or 0) / 1e6) - 1
        step = started[i][1] if i >= 0 else "-"
        seconds = [(getattr(m, f"{k}_cumulative_compile_time_us", None) or 0) / 1e6
                   for k in ("dynamo", "aot_autograd", "inductor")]
        total = (getattr(m, "duration_us", None) or 0) / 1e6
        print("frame", step, f"{m.co_name}:{m.co_firstlineno}", m.is_forward, round(total, 3),
              *(round(x, 3) for x in seconds), m.guard_count, m.graph_op_count)
        count, sum_ = by_step.get(step, (0, 0.0))
        by_step[step] = count + 1, sum_ + total
    for step, (count, total) in by_step.items():
        print("frames at step", step, count, "seconds", round(total, 2))
    print("frames", sum(c for c, _ in by_step.values()), "seconds", round(sum(t for _, t in by_step.values()), 2))


def main():
    flags = sys.argv[1:]
    profiler = cProfile.Profile() if "--cprofile" in flags else None
    flags = [flag for flag in flags if flag != "--cprofile"]
    config = torch._inductor.config
    print("compile_threads", config.compile_threads, "worker_start", config.worker_start_method, flush=True)
    tuned, started = [], []
    record_autotuning(tuned)
    record_steps(started)
    torch._dynamo.utils.set_compilation_metrics_limit(100000)
    if profiler:
        profiler.enable()
    status = train_gpt.main(flags)
    if profiler:
        profiler.disable()
        for key in ("cumulative", "tottime"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(45)
            print(text.getvalue()[-9000:])
    print(compile_times(repr="str", aggregate=True))
    print_frames(started)
    print("autotuned", len(tuned), "seconds", round(sum(seconds for *_, seconds in tuned), 2))
    for name, variants, seconds in tuned[:60]:
        print("tuned", name, variants, round(seconds, 3))
    for key in ("aot_autograd", "inductor"):
        print("counters", key, {k: v for k, v in counters[key].items() if "cache" in k or "bypass" in k})
    print("rc", status)


if __name__ == "__main__":  # the helper processes of a cold start import this file again
    main()
