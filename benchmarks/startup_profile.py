"""Where a start-up's time goes: train_gpt.main() in this process, then Dynamo's compile phases, the kernels
Inductor autotuned, and AOTAutograd's and Inductor's cache counters. One GPU.

    python benchmarks/startup_profile.py [--cprofile] [any train_gpt flag]

Run it twice with the same --compile_cache, an empty directory first (cold), then again (warm); short runs
are enough: --scheduled_steps 30 --extension_steps 1 --val_loss_every 0. The log's start-up line splits each
run by phase. This script imports Inductor before main(), which moves seconds from the log's "model" phase into
"imports": compare totals. Imported rather than run as a program, train_gpt keeps no bytecode of its own
(see its first lines). --cprofile adds Python's profile of the whole run, by cumulative and own time.
"""
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


def main():
    flags = sys.argv[1:]
    profiler = cProfile.Profile() if "--cprofile" in flags else None
    flags = [flag for flag in flags if flag != "--cprofile"]
    config = torch._inductor.config
    print("compile_threads", config.compile_threads, "worker_start", config.worker_start_method, flush=True)
    tuned = []
    record_autotuning(tuned)
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
    print("autotuned", len(tuned), "seconds", round(sum(seconds for *_, seconds in tuned), 2))
    for name, variants, seconds in tuned[:60]:
        print("tuned", name, variants, round(seconds, 3))
    for key in ("aot_autograd", "inductor"):
        print("counters", key, {k: v for k, v in counters[key].items() if "cache" in k or "bypass" in k})
    print("rc", status)


if __name__ == "__main__":  # the helper processes of a cold start import this file again
    main()
