"""Run a training script (the path in COMPILE_TIMES_OF) as __main__, then print torch._dynamo's compile times per
phase, one table per rank, as the process exits: where a warm start's warm-ups spend their time.

    COMPILE_TIMES_OF=train_gpt.py python3 benchmarks/proxy_record.py --script compile_times.py ...
"""
import atexit
import os
import runpy
import sys


def report():
    from torch._dynamo.utils import compile_times
    print(f"compile times, rank {os.environ.get('RANK', '0')}:\n{compile_times(repr='str', aggregate=True)}",
          flush=True)


if __name__ == "__main__":
    atexit.register(report)
    sys.argv[0] = os.environ["COMPILE_TIMES_OF"]
    runpy.run_path(sys.argv[0], run_name="__main__")
