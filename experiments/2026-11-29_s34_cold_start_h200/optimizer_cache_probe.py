"""Session 34, on the CPU (Inductor's CPU backend, the smoke model): does the training process's Adam (and RowAdam)
update hit what Precompiler's compile_optimizer_updates compiled? Run the helper's part, then the training process's
four steps, into one cache; each prints its compiled frames, AOTAutograd's and Inductor's cache counters.

    python3 optimizer_cache_probe.py CACHE helper_compiled
    python3 optimizer_cache_probe.py CACHE main_compiled [AOT_LOG]

AOT_LOG: a file for AOTAutograd's cache-key details (logging at DEBUG), to compare the two processes' keys. On torch
2.13 every graph missed across processes: their keys differ only in a compiled function's name, which holds a UUID.
"""
import logging
import os
import sys
from pathlib import Path

cache, role = sys.argv[1], sys.argv[2]
os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache + "/inductor"  # before Inductor's import sets its default
os.environ["TRITON_CACHE_DIR"] = cache + "/triton"
sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "train_gpt.py").exists())))
import torch  # noqa: E402
import train_gpt as tg  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

if len(sys.argv) > 3:
    handler = logging.FileHandler(sys.argv[3], mode="w")
    logger = logging.getLogger("torch._functorch._aot_autograd.autograd_cache")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
tg.on_gpu_compiled = lambda function, cuda, dynamic=True: tg.compiled(function, dynamic, True)  # the CPU too
args = tg.parse_args(["--smoke"])
torch.manual_seed(0)
model = tg.GPT(args, fp8=False)
tg.compile_regions(model)  # its settings enter the cache keys, as in both of a cold start's processes on a GPU
torch._dynamo.utils.set_compilation_metrics_limit(100000)
if role == "helper_compiled":
    tg.compile_optimizer_updates(model, args, world_size=1)
else:
    shapes = [tg.train_shape(args, 1, stage) for stage in tg.TRAINING_STAGES]
    optimizers = tg.make_optimizers(model, args, 1)
    batches = tg.synchronous_batches(tg.train_source(args, 0, 1, pin_memory=False),
                                     [shapes[tg.stage_index(s, args)] for s in range(4)])
    for step, batch in zip(range(4), batches):
        tg.train_step(model, batch, optimizers, step, args, 1)
for m in torch._dynamo.utils.get_compilation_metrics():
    print(role, "frame", m.co_name, "aot_s", round((m.aot_autograd_cumulative_compile_time_us or 0) / 1e6, 3),
          "inductor_s", round((m.inductor_cumulative_compile_time_us or 0) / 1e6, 3), "guards", m.guard_count)
print(role, "aot", {k: v for k, v in counters["aot_autograd"].items() if "cache" in k or "bypass" in k})
print(role, "inductor", {k: v for k, v in counters["inductor"].items() if "fxgraph" in k})
