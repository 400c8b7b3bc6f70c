"""Step time of train_gpt.py at several git revisions, in one call: the A/B behind every speed claim. One GPU.

    python benchmarks/step_ab.py --revs main my-branch . [--steps 10] [any train_gpt flag]

For each revision (`.` is the working tree; a path to a file is used as it is, which is the way where
there is no git history, as on the device machines) its train_gpt.py is measured in a fresh process: the model,
the optimizers and one step's batch, kept on the GPU so that no data cost enters; then, at the shortest
and at the longest window of the schedule, a few untimed steps (the compile) and `--steps` timed ones.
Prints a table: the median step per window, its ratio to the first revision's, and peak memory. The
revisions are measured one after another, so run them in one call, on one machine.
"""
import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
WARMUP_STEPS = 4


def measure(module_path, steps, flags):
    """Median step (ms) at the first and the last step's window, and peak memory (GiB), as one JSON line."""
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("train_gpt_under_test", module_path)
    tg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tg)
    args = tg.parse_args(flags)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # train_shape(args, 1), written out: revisions older than train_shape must be measurable too
    shape = tg.BatchShape(args.micro_batch_tokens, args.max_seq_len, args.batch_tokens // args.micro_batch_tokens)
    model = tg.build_model(args, device, 1)
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, pin_memory=device.type == "cuda")
    batch = tg.PrefetchLoader(source, device).send(shape)
    adam, muon = tg.make_optimizers(model, args, 1, device)
    result = {}
    for step in (0, args.num_iterations - 1):
        times = []
        for _ in range(WARMUP_STEPS + steps):
            clock = time.perf_counter()
            tg.train_step(model, batch, adam, muon, step, args, 1).item()
            times.append(1000 * (time.perf_counter() - clock))
        result[str(tg.long_window(step, args))] = statistics.median(times[WARMUP_STEPS:])
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    print(json.dumps({"median_ms": result, "peak_gib": peak}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revs", nargs="+", default=["HEAD", "."], help="git revisions, . or files")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per window")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the child process's module path
    own, flags = parser.parse_known_args()
    if own.measure:
        return measure(own.measure, own.steps, flags)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for rev in own.revs:
            path = ROOT / "train_gpt.py" if rev == "." else Path(rev).resolve()
            if not path.is_file():
                path = Path(scratch, f"train_gpt_{len(results)}.py")
                source = subprocess.run(["git", "show", f"{rev}:train_gpt.py"], cwd=ROOT, capture_output=True,
                                        text=True)
                if source.returncode:
                    sys.exit(f"git show {rev}:train_gpt.py failed: {source.stderr.strip()}")
                path.write_text(source.stdout)
            child = subprocess.run([sys.executable, __file__, "--measure", str(path), "--steps", str(own.steps),
                                    *flags], cwd=ROOT, capture_output=True, text=True)
            if child.returncode:
                sys.exit(f"{rev}: the measurement failed:\n{child.stdout[-2000:]}\n{child.stderr[-4000:]}")
            results.append((rev, json.loads(child.stdout.strip().splitlines()[-1])))
    windows = list(results[0][1]["median_ms"])
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"{device}, batch resident, median of {own.steps} steps after {WARMUP_STEPS} per window")
    print("| revision | " + " | ".join(f"window {w} | vs first" for w in windows) + " | peak memory |")
    print("|---|" + "---:|---:|" * len(windows) + "---:|")
    first = results[0][1]["median_ms"]
    for rev, result in results:
        median = result["median_ms"]
        cells = " | ".join(f"{median[w]:.1f} ms | {median[w] / first[w] - 1:+.2%}" for w in windows)
        print(f"| {rev} | {cells} | {result['peak_gib']:.1f} GiB |")


if __name__ == "__main__":
    main()
