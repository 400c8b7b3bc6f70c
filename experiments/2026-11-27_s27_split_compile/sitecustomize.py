"""Session 27's diagnostic, on PYTHONPATH (it runs in every Python process started with it, helpers and compile
workers included): with COUNTERS_OUT set, each process that imported Dynamo appends, at exit, a JSON line with its
compile counters (FX graph and AOTAutograd cache hits and misses, graphs compiled) and Dynamo's compile_times
table. Its stack sampler, which never ran on a GPU, is now benchmarks/startup_profile.py's --sample."""
import atexit
import json
import os
import sys


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


atexit.register(dump_counters)
