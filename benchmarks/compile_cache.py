"""Start-up time with and without the compile cache, and the step time either way. One GPU.

    python benchmarks/compile_cache.py [--steps 40] [--cache_dir DIR] [any train_gpt flag]

Runs train_gpt.py three times, each in a new process, all on the same data:
  cold     an empty compile cache directory: everything compiles
  warm     the directory the cold run filled (Inductor's and Triton's caches and PyTorch's portable
           cache artifacts): what a run on a fresh machine sees when the directory is carried there
  corrupt  a copy of that directory whose artifacts are overwritten with garbage: must warn and train
The compile caches that PyTorch would otherwise keep in /tmp and ~/.triton are redirected into the
directory (train_gpt does this unless TORCHINDUCTOR_CACHE_DIR or TRITON_CACHE_DIR are set, so they are
unset here): nothing compiled by an earlier run leaks into the cold one. The directory is a temporary
one unless --cache_dir names a new one: keep that to carry it to a fresh machine and start a run there
with `--compile_cache DIR`.

Each run is `--steps` steps long: --scheduled_steps STEPS --extension_steps 0, so the stages are those of the
record scaled to it, and the warm-up compiles every stage's shapes as the record's does. Prints a table: the
start-up split from each run's log (imports, device and log header, compile cache, model, data, the warm-up of
each stage, validation warm-up, total), the median step time over the steps after the first five, the median
ratio of those steps to the cold run's same steps, and the final val loss.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "records"))
from summarize import check_log  # noqa: E402

STARTUP_RE = re.compile(r"([a-z][a-z\d ()-]*?) ([\d.]+)s(?:, |$)")  # "warm-up stage 0 12.3s, ..."


def train(cache, steps, flags):
    """Run train_gpt.py once; returns its log's Run, its start-up split and any cache warning it printed."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    command = [sys.executable, "train_gpt.py", "--scheduled_steps", str(steps), "--extension_steps", "0",
               "--val_loss_every", "0", "--compile_cache", str(cache), *flags]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    run_id = re.search(r"^run_id: (\S+)$", result.stdout, re.M).group(1)
    run, problems = check_log(ROOT / "logs" / f"{run_id}.txt")
    if problems:
        sys.exit("\n".join(problems))
    startup = re.search(r"^startup: (.*)$", result.stdout, re.M).group(1)
    phases = STARTUP_RE.findall(startup)
    if ", ".join(f"{name} {seconds}s" for name, seconds in phases) != startup:  # a phase the regex would drop
        sys.exit(f"cannot parse the start-up split {startup!r}")
    split = {name: float(seconds) for name, seconds in phases}
    warnings = [line for line in (result.stdout + result.stderr).splitlines()
                if "cache" in line.lower() and ("warn" in line.lower() or "mismatch" in line.lower())]
    return run, split, warnings


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--cache_dir", type=Path, help="where the cold run builds its cache (must not exist)")
    args, flags = parser.parse_known_args()
    import torch
    if not torch.cuda.is_available():
        sys.exit("needs a GPU: train_gpt compiles, and so caches, on CUDA only")
    if args.steps <= 5:
        parser.error("--steps must exceed the 5 steps left out of the median")
    if args.cache_dir is not None and args.cache_dir.exists():
        parser.error(f"--cache_dir {args.cache_dir} exists: the cold run needs a new directory")
    with tempfile.TemporaryDirectory() as scratch:
        cache = args.cache_dir.resolve() if args.cache_dir else Path(scratch, "cache")
        corrupt = Path(scratch, "corrupt")
        rows = [("cold", *train(cache, args.steps, flags))]
        rows.append(("warm", *train(cache, args.steps, flags)))
        shutil.copytree(cache, corrupt)
        for artifacts in corrupt.glob("artifacts.gpu*.bin"):
            artifacts.write_bytes(os.urandom(4096))
        rows.append(("corrupt", *train(corrupt, args.steps, flags)))

    phases = list(rows[0][2])
    cold_steps = rows[0][1].step_ms[5:]
    print("| run | " + " | ".join(phases) + " | median step | vs cold | final val loss |")
    print("|---|" + "---:|" * (len(phases) + 3))
    for name, run, split, _ in rows:
        # Each stage has its own batch and windows, so step times change from stage to stage: compare each
        # step with the cold run's same step (the median of those ratios), not the two medians, which mix the
        # stages and jump with noise.
        versus_cold = statistics.median(t / c - 1 for t, c in zip(run.step_ms[5:], cold_steps))
        times = " | ".join(f"{split.get(phase, float('nan')):.1f} s" for phase in phases)
        print(f"| {name} | {times} | {statistics.median(run.step_ms[5:]):.1f} ms | {versus_cold:+.2%} | "
              f"{run.val_loss:.4f} |")
    for name, _, _, warnings in rows:
        print(f"{name}: {warnings[0] if warnings else 'no cache warning'}")


if __name__ == "__main__":
    main()
