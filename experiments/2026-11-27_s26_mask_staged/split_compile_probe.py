"""Session 26, for session 27 (one GPU): can stage 0's cold compile be split across processes by region?

A cold start compiles every region of stage 0 in the training process, one after another (about 50-66 s of its
warm-up on an H100 host), while helper processes compile the later stages (Precompiler). Here a process compiles
only some of the regions (the others run eagerly) at stage 0's warm-up steps, into a compile cache:

    python split_compile_probe.py CACHE PARTS [train_gpt flags]

PARTS: a comma-separated subset of before_attention, after_attention, mix_and_mlp, head, or "all"; or
"validation": what Precompiler's validation helper does (the optimizers' compiled updates, then the validation
shape, every region), so that a start on the cache does not compile the optimizers in its first step. It prints
the seconds the process took, those from the model's build on, and its peak GPU memory. Run several at once into one CACHE, then
`train_gpt.py --compile_cache CACHE` with the same flags: if its stage 0 warm-up finds every region in the cache,
it takes about a warm start's time (a region compiled next to eager neighbours must see the inputs it sees in the
run: same shapes, strides and dtypes). The caches are pointed where train_gpt's load_compile_cache points them
(CACHE/inductor, CACHE/triton), and the regions are compiled by train_gpt's own compile_regions (its Dynamo and
Inductor settings enter the cache keys), after which the regions outside PARTS are made eager again.
"""
import os
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "train_gpt.py").exists())  # run from scratch/ or here
PARTS = ("before_attention", "after_attention", "mix_and_mlp", "head")


def main(cache, parts, flags):
    for name, folder in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
        os.environ[name] = str(Path(cache).resolve() / folder)  # before Inductor's import sets its default
    sys.path.insert(0, str(ROOT))
    import torch
    import train_gpt as tg

    keep = set(PARTS) if parts in ("all", "validation") else set(parts.split(","))
    assert keep <= set(PARTS), f"unknown parts: {sorted(keep - set(PARTS))}"
    compile_regions = tg.compile_regions

    def some_regions(model):
        compile_regions(model)
        for block in model.blocks:
            for part in PARTS[:3]:
                if part not in keep:
                    delattr(block, part)  # the compiled wrapper was set on the instance: the class's method again
        if "head" not in keep:
            model.head._compiled_call_impl = None  # nn.Module.compile's wrapper
    tg.compile_regions = some_regions

    args = tg.parse_args(flags)
    device = torch.device("cuda", 0)
    shapes = [tg.train_shape(args, 1, stage) for stage in tg.TRAINING_STAGES]
    val_shape = tg.BatchShape(args.val_seq_tokens, args.val_seq_tokens, 1)
    clock = time.perf_counter()
    tg.precompile(args, device, 1, shapes, val_shape, [None if parts == "validation" else 0])
    torch.cuda.synchronize()
    print(f"parts {parts}: {time.perf_counter() - STARTED:.1f} s in all, {time.perf_counter() - clock:.1f} s from the "
          f"model's build on, peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
