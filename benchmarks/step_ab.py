"""Step time of train_gpt.py at several git revisions, in one call: the A/B behind every speed claim. One GPU.

    python benchmarks/step_ab.py --revs main my-branch . [--steps 10] [any train_gpt flag]

For each revision (`.` is the working tree; a path to a file is used as it is, which is the way where
there is no git history, as on the device machines) its train_gpt.py is measured in a fresh process: the model,
the optimizers and one batch per training stage, kept on the GPU so that no data cost enters; then, for each
stage of TRAINING_STAGES, at its first steps with its batch shape and windows, a few untimed steps (the
compile) and `--steps` timed ones. Prints a table: the step time per stage, its ratio to the first
revision's, the whole run's steps at those times (each stage's step times its number of steps: the time per
token of the run, as every revision trains the same tokens) and its ratio, and peak memory. The revisions
are measured one after another, so run them in one call, on one machine. A revision whose loss turns NaN or
infinite is named under the table: its times are not a training run's. The data source is the run's own
(tg.train_source, from the flags: pass --repeat_train_files for a small corpus). Revisions older than
tg.train_source (2026-11-26) cannot be measured by this script: use the step_ab.py of their own revision.
"""
import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
WARMUP_STEPS = 4


def stage_steps(tg, args):
    """(stage index, its first two steps) for each stage that has training steps: Adam steps on odd steps
    only, so a stage's step costs the mean of an even and an odd one (a one-step stage has only its one).
    The first of them past untie_step unties the embedding, once."""
    starts = tg.stage_starts(args)
    ends = starts[1:] + [tg.total_steps(args)]
    return [(i, list(range(start, min(start + 2, end)))) for i, (start, end) in enumerate(zip(starts, ends))
            if start < end]


def run_seconds(result):
    """The run's training steps at the measured step times: the sum over stages of steps x step time (s)."""
    return sum(result["steps"][s] * ms for s, ms in result["median_ms"].items()) / 1000


def measure(module_path, steps, flags):
    """Step time (ms) per stage, the stage's windows and number of steps, and peak memory (GiB), printed as
    one JSON line: {"median_ms": {stage: ms}, "windows": {stage: [short, long]}, "steps": {stage: n},
    "peak_gib": GiB, "not_finite": the first step whose loss was NaN or infinite, or null}, stages as strings."""
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("train_gpt_under_test", module_path)
    tg = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tg  # inspect finds a class's source through its module (parse_args's --help)
    spec.loader.exec_module(tg)
    if not hasattr(tg, "train_source"):
        sys.exit(f"{module_path} has no train_source: it predates the set-up that this script shares with the run")
    try:
        print(json.dumps(measure_stages(tg, steps, flags)))
    except tg.UserError as error:  # a bad flag or data file: one line, as train_gpt.py reports it
        sys.exit(f"error: {error}")


def measure_stages(tg, steps, flags):
    args = tg.parse_args(flags)
    _, _, device = tg.init_process()  # as the revision trains: its device, its cuBLAS settings
    model = tg.build_model(args, device, 1)
    loader = tg.PrefetchLoader(tg.train_source(args, 0, 1, pin_memory=device.type == "cuda"), device)
    optimizers = tg.make_optimizers(model, args, 1)
    result, windows, not_finite = {}, {}, None
    starts = tg.stage_starts(args)
    counts = {str(i): end - start for i, (start, end) in enumerate(zip(starts, starts[1:] + [tg.total_steps(args)]))}
    for i, step_numbers in stage_steps(tg, args):
        batch = loader.send(tg.train_shape(args, 1, tg.TRAINING_STAGES[i]))  # resident from here on
        times = {step: [] for step in step_numbers}
        for k in range(len(step_numbers) * (WARMUP_STEPS + steps)):  # the stage's steps in turn
            step = step_numbers[k % len(step_numbers)]
            clock = time.perf_counter()
            loss = tg.train_step(model, batch, optimizers, step, args, 1).item()
            times[step].append(1000 * (time.perf_counter() - clock))
            if not_finite is None and not math.isfinite(loss):
                not_finite = f"stage {i}, step {step}"
        # the median of each step, without its warm-up, averaged over the even and the odd one
        result[str(i)] = statistics.mean(statistics.median(t[WARMUP_STEPS:]) for t in times.values())
        windows[str(i)] = tg.attention_windows(step_numbers[0], args)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return {"median_ms": result, "windows": windows, "steps": {s: counts[s] for s in result}, "peak_gib": peak,
            "not_finite": not_finite}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revs", nargs="+", default=["HEAD", "."], help="git revisions, . or files")
    parser.add_argument("--steps", type=int, default=10, help="timed repetitions of each measured step")
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
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print("\n".join(table(results, own.steps, device)))


def table(results, steps, device):
    """The printed lines: a header, the table ((revision, measure's result) per row) and a warning for each
    revision whose loss was not finite."""
    # Columns are the first revision's stages; a revision that changes a stage's windows says so in its cell,
    # and one without that stage gets a dash.
    first = results[0][1]
    stages = list(first["median_ms"])
    lines = [f"{device}, batch resident, per stage its first two steps (one with Adam's step, one without): "
             f"the mean of their medians over {steps} steps after {WARMUP_STEPS}",
             "| revision | " + " | ".join(f"stage {s}, windows {tuple(first['windows'][s])} | vs first"
                                        for s in stages) + " | run's steps | vs first | peak memory |",
             "|---|" + "---:|---:|" * (len(stages) + 1) + "---:|"]
    for rev, result in results:
        cells = []
        for s in stages:
            if s not in result["median_ms"]:
                cells.append("– | –")
                continue
            ms = result["median_ms"][s]
            other = "" if result["windows"][s] == first["windows"][s] else f" at {tuple(result['windows'][s])}"
            cells.append(f"{ms:.1f} ms{other} | {ms / first['median_ms'][s] - 1:+.2%}")
        if result["steps"] == first["steps"]:
            cells.append(f"{run_seconds(result):.1f} s | {run_seconds(result) / run_seconds(first) - 1:+.2%}")
        else:  # another schedule: its own run, not comparable step for step
            cells.append(f"{run_seconds(result):.1f} s, other steps | –")
        lines.append(f"| {rev} | {' | '.join(cells)} | {result['peak_gib']:.1f} GiB |")
    for rev, result in results:
        if result["not_finite"]:  # the first FP8 MLP projection ran 4.6 % faster with NaN weights
            lines.append(f"{rev}: THE LOSS WAS NOT FINITE from {result['not_finite']} on: these are not a training "
                         "run's step times; do not compare them")
    return lines


if __name__ == "__main__":
    main()
