"""Dynamo's graphs and tracing time for the regions over stages 0-2's batch shapes, on the CPU with the smoke model
and Dynamo's eager backend (tracing only, no Inductor): do symbolic token counts save a warm start's re-tracing?

    python experiments/2026-11-27_s21_profiles_records/dynamo_graphs.py static|automatic|symbolic

static: the regions as compile_regions compiles them (dynamic=False); automatic: dynamic=None, so Dynamo makes a
region symbolic at its second shape; symbolic: dynamic=True from the first shape."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402
import train_gpt as tg  # noqa: E402
from torch._dynamo.utils import compile_times, counters  # noqa: E402

mode = sys.argv[1]
compile_as_written = torch.compile


def compile_eager(fn=None, **kwargs):
    if kwargs.get("dynamic") is False and mode != "static":
        kwargs["dynamic"] = None if mode == "automatic" else True
    return compile_as_written(fn, **{**kwargs, "backend": "eager"})


torch.compile = compile_eager
torch._dynamo.config.automatic_dynamic_shapes = mode != "static"
args = tg.parse_args(["--smoke"])
model = tg.build_model(args, torch.device("cpu"), 1)
tg.compile_regions(model)
source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
starts = tg.stage_starts(args)
for i in range(3):
    (micro, *_), state = next(tg.synchronous_batches(source, [tg.train_shape(args, 1, tg.TRAINING_STAGES[i])])), \
        tg.step_state(starts[i], args)
    model.prepare(state)
    clock = time.perf_counter()
    tg.forward_backward(model, micro, state)
    print(f"stage {i}: {time.perf_counter() - clock:.1f} s, graphs so far {counters['stats']['unique_graphs']}")
print(compile_times(repr="str", aggregate=True)[:400])
