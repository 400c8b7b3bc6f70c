"""Proxy time-to-loss runs on one GPU (or several: --gpus), the measure of issues 13 and 14, in one command.

    python benchmarks/proxy_record.py --runs 3 --out records/<date>_proxy_<name> [any train_gpt flag]

Decompresses the proxy corpus (`.proxy/*.bin.xz`, a copy of ../shared/proxy-data carried to the device
machine; or --proxy DIR) into data/proxy/ once, checks that data/proxy/ holds the whole corpus and nothing
else, runs train_gpt.py --runs times one after another with the proxy flags below plus the flags given (e.g.
--scheduled_steps 300 --extension_steps 3), copies each run's log into --out, and runs records/summarize.py on
it against the Aug-2025 record's proxy loss 1.9004. The first run compiles (keep --compile_cache between calls);
the record is the mean over all the runs.

Run i (from 0) draws its initial weights with --seed i, so that the runs' spread, which the t-test weighs,
includes the initialisation's, as in the public speedrun, whose runs are not seeded. A --seed among the flags
holds every run to that seed (an A/B of two revisions on the same draw). With --gpus N each run is torchrun's
N processes on this host's first N GPUs: the same global batch, each rank its share. Two of these started side by
side from one folder, each on its own GPU (CUDA_VISIBLE_DEVICES), keep their runs' logs apart: a run's log is
found by the run_id it prints.
"""
import argparse
import lzma
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import train_gpt  # noqa: E402

PROXY_FLAGS = ["--train_files", "data/proxy/proxy_train_*.bin", "--val_files", "data/proxy/proxy_val_*.bin",
               "--repeat_train_files", "--val_tokens", "1835008", "--val_loss_every", "50"]
TARGET = "1.9004"  # the Aug-2025 record script's final val loss after its 250 proxy steps (189.7 s)
# The proxy corpus's train and val shards (../shared/proxy-data/MANIFEST.json) and their token counts: a time to
# loss reads all of them. Session 31's runs read shard 3 alone (2.6M tokens, 28 times over), memorised it and
# measured nothing.
PROXY_SHARDS = {"proxy_train_000001.bin": 20_003_432, "proxy_train_000002.bin": 20_004_708,
                "proxy_train_000003.bin": 2_649_129, "proxy_val_000000.bin": 2_000_184}


def decompress(proxy_dir, data_dir):
    data_dir.mkdir(parents=True, exist_ok=True)
    for archive in sorted(proxy_dir.glob("*.bin.xz")):
        shard = data_dir / archive.name.removesuffix(".xz")
        if not shard.exists():
            # each process its own partial file: runs started side by side may both decompress (the same bytes)
            partial = shard.with_name(f"{shard.name}.{os.getpid()}.partial")
            with lzma.open(archive) as source, open(partial, "wb") as target:
                shutil.copyfileobj(source, target, 1 << 24)
            partial.replace(shard)


def check_corpus(data_dir):
    """Exit with an error unless data_dir holds the whole proxy corpus (PROXY_SHARDS, each shard whole) and no
    other train or val shard that PROXY_FLAGS' patterns would read."""
    present = {path.name: path for pattern in ("proxy_train_*.bin", "proxy_val_*.bin")
               for path in data_dir.glob(pattern)}
    problems = [f"{name} missing" for name in PROXY_SHARDS if name not in present]
    problems += [f"{name} is no shard of the proxy corpus" for name in present if name not in PROXY_SHARDS]
    for name, tokens in PROXY_SHARDS.items():
        if name in present:
            try:
                count = train_gpt.shard_token_count(present[name])
            except train_gpt.ShardError as error:
                problems.append(str(error))
                continue
            if count != tokens:
                problems.append(f"{name} holds {count:,} tokens, not {tokens:,}")
    if problems:
        sys.exit(f"error: {data_dir}: {'; '.join(problems)}. A time to loss reads the whole proxy corpus: copy "
                 f"../shared/proxy-data/*.bin.xz into --proxy (and remove what is not the corpus's)")


def run_flags(flags, run):
    """The flags of run `run` (from 0): its own seed, unless the flags fix one."""
    if any(flag == "--seed" or flag.startswith("--seed=") for flag in flags):
        return list(flags)
    return [*flags, "--seed", str(run)]


def run_command(script, gpus):
    """The command that runs `script` once: in this Python, or torchrun's `gpus` processes of it."""
    if gpus == 1:
        return [sys.executable, script]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}", script]


def run_logged(command):
    """Run one training run, its console passed through, and return its log's path, read from the run_id line the
    run prints: not from the files new in logs/, where another run from the same folder (an A/B side by side on
    two GPUs) may be writing too."""
    run_id = None
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if run_id is None and line.startswith("run_id: "):
                run_id = line.split()[1]
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)
    if run_id is None:
        sys.exit("error: the run printed no run_id line, so its log is not known")
    return ROOT / "logs" / f"{run_id}.txt"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="training runs, one after another")
    parser.add_argument("--out", required=True, help="folder for the logs, statistics.md and val_loss.png")
    parser.add_argument("--proxy", default=str(ROOT / ".proxy"), help="folder of the xz-compressed proxy shards")
    parser.add_argument("--script", default="train_gpt.py",
                        help="the script to run, relative to the repository: another revision's copy, for an A/B")
    parser.add_argument("--gpus", type=int, default=1, help="processes (GPUs) per run, through torchrun")
    own, flags = parser.parse_known_args()
    decompress(Path(own.proxy), ROOT / "data" / "proxy")
    check_corpus(ROOT / "data" / "proxy")
    out = Path(own.out)
    out.mkdir(parents=True, exist_ok=True)
    for run in range(own.runs):
        clock = time.perf_counter()
        log = run_logged([*run_command(own.script, own.gpus), *PROXY_FLAGS, *run_flags(flags, run)])
        shutil.copy(log, out / log.name)
        print(f"run {run + 1} of {own.runs}: {log.name}, {time.perf_counter() - clock:.0f} s with start-up",
              flush=True)
    summary = subprocess.run([sys.executable, "records/summarize.py", str(out.resolve()), "--target", TARGET],
                             cwd=ROOT)
    sys.exit(summary.returncode)


if __name__ == "__main__":
    main()
