"""Where a start-up's time goes: train_gpt.main() in this process, then Dynamo's compile phases, every frame
Dynamo compiled (during which warm-up step, for how long, in which phase) with the sums per step, the kernels
Inductor autotuned, and AOTAutograd's and Inductor's cache counters. One GPU.

    python benchmarks/startup_profile.py [--sample] [any train_gpt flag]

Run it twice with the same --compile_cache, an empty directory first (cold), then again (warm); short runs
are enough: --scheduled_steps 30 --extension_steps 1 --val_loss_every 0. The log's start-up line splits each
run by phase. Give it the bytecode cache that train_gpt.py gives itself when run as a program (for
example PYTHONPYCACHEPREFIX=.bytecode, PYTHONDONTWRITEBYTECODE unset), or its imports compile torch's sources
again. This script imports Inductor before main(), which moves seconds from the log's "model" phase into
"imports": compare totals. Imported rather than run as a program, train_gpt keeps no bytecode of its own
(see its first lines). Fill its cache with this script: a process that imports train_gpt keeps its own part
of a compile cache, apart from train_gpt.py's as a program (train_gpt.cache_name).
--sample adds where the main thread's time went, by function, over the run and inside the warm-up
(StackSampler): cProfile, which this offered before, made a 33 s warm start last over 160 s (session 27) and
Inductor's cache miss (session 13).
"""
import bisect
import collections
import os
import sys
import threading
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

    def recorded(self, step, trace=False):
        started.append((time.time(), step))
        return train_step(self, step, trace)
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


class StackSampler:
    """The main thread's stack, sampled every `interval` seconds by a thread of its own: the seconds of samples
    with each function on the stack (inclusive) and on its top (own), over the run and inside warm_up. A sample
    costs one walk of the stack. It waits for Python's lock: time in a C call that holds it is counted where the
    thread is once it lets go."""

    def __init__(self, interval=0.005):
        self.interval, self.main = interval, threading.main_thread().ident
        self.seconds = {(phase, kind): collections.Counter() for phase in ("run", "warm_up")
                        for kind in ("inclusive", "own")}
        self.running = False

    def start(self):
        self.running = True
        self.thread = threading.Thread(target=self.sample, name="stack sampler", daemon=True)
        self.thread.start()

    def stop(self):
        self.running = False
        self.thread.join()

    def sample(self):
        last = time.perf_counter()
        while self.running:
            time.sleep(self.interval)
            frame = sys._current_frames().get(self.main)
            now = time.perf_counter()
            weight, last = now - last, now
            stack = []
            while frame is not None:
                code = frame.f_code
                stack.append(f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})")
                frame = frame.f_back
            if not stack:
                continue
            for phase in ("run", "warm_up")[: 1 + any(name.startswith("warm_up (") for name in stack)]:
                self.seconds[phase, "own"][stack[0]] += weight
                for name in set(stack):
                    self.seconds[phase, "inclusive"][name] += weight

    def print(self, top=40):
        for (phase, kind), seconds in self.seconds.items():
            for name, value in seconds.most_common(top):
                print("sampled", phase, kind, round(value, 2), name)


def main():
    flags = sys.argv[1:]
    sampler = StackSampler() if "--sample" in flags else None
    flags = [flag for flag in flags if flag != "--sample"]
    config = torch._inductor.config
    print("compile_threads", config.compile_threads, "worker_start", config.worker_start_method, flush=True)
    tuned, started = [], []
    record_autotuning(tuned)
    record_steps(started)
    torch._dynamo.utils.set_compilation_metrics_limit(100000)
    if sampler:
        sampler.start()
    status = train_gpt.main(flags)
    if sampler:
        sampler.stop()
        sampler.print()
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
