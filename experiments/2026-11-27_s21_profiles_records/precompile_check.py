"""Dynamo's own cache (torch._dynamo.config.caching_precompile, as TORCH_CACHING_PRECOMPILE=1 sets it) on the CPU:
the smoke model's regions compiled over stages 0-2, twice, in fresh processes sharing one --compile_cache folder
(train_gpt's load_compile_cache and save_compile_cache). With --through_ops, a copy of train_gpt.py calls its
custom ops as torch.ops.train_gpt.<name> instead of through their CustomOpDef objects; with --grads_none, the
parameters' gradients are set to None before each stage (a tensor's gradient in a guard is saved as missing).

    python experiments/2026-11-27_s21_profiles_records/precompile_check.py [--through_ops] [--grads_none]

Takes minutes: the first process compiles with Inductor's CPU backend."""
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPS = ("softcapped_cross_entropy_fp8", "relu_square_linear_backward_fp8", "relu_square_linear_backward",
       "relu_square_linear_fp8", "relu_square_linear")


def child(folder, cache, grads_none):
    sys.path.insert(0, str(folder))
    import torch
    torch._dynamo.config.caching_precompile = True
    import train_gpt as tg
    from torch._dynamo.utils import compilation_time_metrics, counters
    # the copy's default paths would be beside it: the smoke run's data from the repository
    args = tg.parse_args(["--smoke", "--prefix_table", str(ROOT / "data/gpt2_prefix_tokens.npy"),
                          "--train_files", str(ROOT / "data/sample/sample_train_*.bin"),
                          "--val_files", str(ROOT / "data/sample/sample_val_*.bin")])
    print("artifacts loaded:", tg.load_compile_cache(cache, 0, print), flush=True)
    model = tg.build_model(args, torch.device("cpu"), 1)
    tg.compile_regions(model)
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
    starts = tg.stage_starts(args)
    for i in range(3):
        (micro, *_) = next(tg.synchronous_batches(source, [tg.train_shape(args, 1, tg.TRAINING_STAGES[i])]))
        state = tg.step_state(starts[i], args)
        model.prepare(state)
        if grads_none:
            model.zero_grad(set_to_none=True)
        clock = time.perf_counter()
        tg.forward_backward(model, micro, state)
        print(f"stage {i}: {time.perf_counter() - clock:.1f} s", flush=True)
    tg.save_compile_cache(cache, 0)
    tracing = sum(compilation_time_metrics.get("bytecode_tracing", []))
    print("dynamo cache:", dict(counters["dynamo_cache"]), f"bytecode tracing {tracing:.1f} s", flush=True)


def main():
    if sys.argv[1:2] == ["--child"]:
        return child(Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "True")
    with tempfile.TemporaryDirectory() as scratch:
        source = (ROOT / "train_gpt.py").read_text()
        if "--through_ops" in sys.argv:
            pattern = r"(?<![\w.])(?<!def )(" + "|".join(OPS) + r")\((?=[\w(])"
            source = re.sub(pattern, r"torch.ops.train_gpt.\1(", source)
        Path(scratch, "train_gpt.py").write_text(source)
        for run in ("first", "second"):
            print(f"== {run} process", flush=True)
            cache = Path(scratch, "cache")  # Inductor's cache inside it from the start: Dynamo's is there too
            env = {**os.environ, "PYTHONWARNINGS": "ignore", "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
                   "TRITON_CACHE_DIR": str(cache / "triton")}
            done = subprocess.run([sys.executable, __file__, "--child", scratch, str(cache),
                                   str("--grads_none" in sys.argv)], capture_output=True, text=True, env=env)
            lines = [line for line in (done.stdout + done.stderr).splitlines()
                     if re.match(r"(artifacts|stage|dynamo|[\w.]*Error)", line)]
            print("\n".join(lines), f"\nexit status {done.returncode}", flush=True)


if __name__ == "__main__":
    main()
