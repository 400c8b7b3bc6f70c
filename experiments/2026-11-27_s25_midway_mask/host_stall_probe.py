"""How much does ValidationMask's build stall another thread of the training process? (session 25)

A stand-in for the thread that queues the training steps: a loop of 200 small CPU matmuls and a 1 ms sleep
(about 4 ms; torch releases Python's lock in each op, and the sleep releases it), timed 200 times alone, then
again and again for 12 s from the moment ValidationMask starts. Prints one table row.

    python3 host_stall_probe.py DIR [LABEL]   # DIR holds the train_gpt.py to probe, imported as train_gpt

Run it with nothing else on the machine: on the 2-core CPU of session 25 each arm takes about 15 s."""
import statistics
import sys
import time
import types

sys.path.insert(0, sys.argv[1])  # a process that ValidationMask starts imports train_gpt from here too
import numpy as np  # noqa: E402
import torch  # noqa: E402

import train_gpt  # noqa: E402


def loop(x):
    start = time.perf_counter()
    for _ in range(200):
        x @ x
    time.sleep(0.001)
    return 1e3 * (time.perf_counter() - start)


if __name__ == "__main__":
    torch.set_num_threads(1)  # one core for this thread, one for the build
    x = torch.randn(64, 64)
    merges = train_gpt.load_merge_table(train_gpt.Path(train_gpt.__file__).with_name("data") / "gpt2_merges.npy",
                                        50304)
    head = types.SimpleNamespace(never_follows=torch.zeros(50304, 50304 // 8, dtype=torch.uint8))
    for _ in range(50):
        loop(x)
    alone = [loop(x) for _ in range(200)]
    clock = time.perf_counter()
    mask = train_gpt.ValidationMask(merges, head)
    started = 1e3 * (time.perf_counter() - clock)
    during = []
    while time.perf_counter() - clock < 12:
        during.append(loop(x))
    pairs = mask.apply()[0]
    assert pairs == 70_889_690 and head.never_follows.any()
    label = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
    print("| build | start | loop alone: median, 90th pct | during 12 s: loops | median | 90th pct | 99th pct "
          "| over 15 ms | longest |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {label} | {started:.0f} ms | {statistics.median(alone):.1f}, {np.percentile(alone, 90):.1f} ms "
          f"| {len(during)} | {statistics.median(during):.1f} ms | {np.percentile(during, 90):.1f} ms "
          f"| {np.percentile(during, 99):.1f} ms | {sum(t > 15 for t in during)} | {max(during):.0f} ms |")
