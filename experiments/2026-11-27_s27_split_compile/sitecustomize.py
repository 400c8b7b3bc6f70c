"""Session 27's diagnostics, on PYTHONPATH (it runs in every Python process started with it, helpers and compile
workers included):
- COUNTERS_OUT: each process that imported Dynamo appends, at exit, a JSON line with its compile counters (FX
  graph and AOTAutograd cache hits and misses, graphs compiled) and Dynamo's compile_times table.
- SAMPLE_OUT: the main process of train_gpt.py samples its main thread's stack every SAMPLE_MS (5) ms in a thread,
  and at exit writes the seconds of samples with each function on the stack (inclusive) and on top (exclusive),
  the most first, for the whole run and for the samples inside warm_up (the start-up's stage warm-ups). cProfile made a 33 s warm start last over 160 s; a sample costs one stack walk. A sample waits
  for Python's lock: time in a C call that holds it is counted where the thread is once it lets go."""
import atexit
import collections
import json
import os
import sys
import threading
import time


def dump_counters():
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None or not os.environ.get("COUNTERS_OUT"):
        return
    counters = {group: dict(values) for group, values in utils.counters.items() if values}
    if not counters:
        return
    import multiprocessing
    with open(os.environ["COUNTERS_OUT"], "a") as out:
        out.write(json.dumps({"pid": os.getpid(), "argv": sys.argv[:3],
                              "process": multiprocessing.current_process().name, "counters": counters,
                              "compile_times": utils.compile_times(repr="str", aggregate=True)}) + "\n")


class Sampler:
    def __init__(self, path, interval):
        self.path, self.interval = path, interval
        self.counts = {(phase, kind): collections.Counter() for phase in ("run", "warm_up")
                       for kind in ("inclusive", "exclusive")}
        self.main = threading.main_thread().ident
        self.running = True
        self.thread = threading.Thread(target=self.run, daemon=True, name="sampler")
        self.thread.start()
        atexit.register(self.write)

    def run(self):
        last = time.perf_counter()
        while self.running:
            time.sleep(self.interval)
            frame = sys._current_frames().get(self.main)
            now = time.perf_counter()
            weight, last = now - last, now
            if frame is None:
                continue
            stack = []
            while frame is not None:
                code = frame.f_code
                stack.append(f"{code.co_name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})")
                frame = frame.f_back
            phases = ["run"] + ["warm_up"] * any(name.startswith("warm_up (") for name in stack)
            for phase in phases:
                self.counts[phase, "exclusive"][stack[0]] += weight
                for name in set(stack):
                    self.counts[phase, "inclusive"][name] += weight

    def write(self):
        self.running = False
        self.thread.join(1)
        with open(self.path, "w") as out:
            for (phase, kind), counts in self.counts.items():
                out.write(f"== {phase}, {kind}: seconds of samples\n")
                for name, seconds in counts.most_common(120):
                    out.write(f"{seconds:9.2f}  {name}\n")


atexit.register(dump_counters)
if os.environ.get("SAMPLE_OUT") and sys.argv and sys.argv[0].endswith("train_gpt.py") and \
        os.environ.get("RANK", "0") == "0":
    import multiprocessing
    if multiprocessing.current_process().name == "MainProcess" and not hasattr(sys, "_sampler_started"):
        sys._sampler_started = True
        Sampler(os.environ["SAMPLE_OUT"], float(os.environ.get("SAMPLE_MS", 5)) / 1000)
