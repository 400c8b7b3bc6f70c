"""Session 27, CPU only: Dynamo's own cost (backend "eager": no AOTAutograd, no Inductor) of tracing the default
model's regions at stage 2's step state, at a small token count (the tracing does not depend on it): graphs, and
the seconds of bytecode tracing and of guard building. With TORCH_TRACE=DIR set, DIR's structured log holds each
frame's compilation_metrics (its compile time and guard count).

    python trace_cost.py [TOKENS]
"""
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402
import torch._dynamo.utils as dynamo_utils  # noqa: E402
import train_gpt as tg  # noqa: E402

tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 512
args = tg.parse_args(["--train_files", f"{ROOT}/data/sample/sample_train_*.bin",
                      "--val_files", f"{ROOT}/data/sample/sample_val_*.bin", "--repeat_train_files",
                      "--ngram_rows", "8192", "--merge_table", "",
                      "--micro_batch_tokens", str(tokens), "--batch_tokens", str(tokens)])
model = tg.GPT(args, fp8=False)
real_compile = torch.compile
torch.compile = lambda fn=None, **kw: real_compile(fn, **{**kw, "backend": "eager"})
tg.compile_regions(model)
source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
candidates = tg.train_shape(args, 1, tg.TRAINING_STAGES[2]).candidates
(micro,) = next(tg.synchronous_batches(source, [tg.BatchShape(tokens, tokens, 1, candidates)]))
state = tg.step_state(tg.stage_starts(args)[2], args)
model.prepare(state)
for i in range(2):
    clock = time.perf_counter()
    model(micro, state).backward()
    print(f"pass {i}: {time.perf_counter() - clock:.2f} s", flush=True)
print(dict(dynamo_utils.counters["stats"]))
print("\n".join(line for line in dynamo_utils.compile_times(repr="str", aggregate=True).splitlines()
                if any(word in line for word in ("compile_inner", "bytecode_tracing", "build_guards"))))
