"""Session 27, for session 28: does Dynamo's own cache (torch._dynamo.config.caching_precompile) spare a warm start
the tracing of train_gpt.py's regions? Dynamo traces every region again at every start, cold or warm (12.5 s of a
cold start's training process on an H100 host; 66 graphs). With caching_precompile, save_cache_artifacts also
saves the traced bytecode and guards, and a later process's torch.compile loads them.

    python dynamo_cache_probe.py save CACHE [--plain] [train_gpt flags]    # compile, then save_compile_cache
    python dynamo_cache_probe.py load CACHE [--plain] [train_gpt flags]    # load it, then the same passes

Both run the same passes: a forward pass at each training stage's first step (grad mode) and at the validation
shape (no grad), then a forward and backward pass at each stage's. --plain: without caching_precompile (the
baseline: what a warm start does today). It prints the seconds to build the model and wrap its regions, and of
those passes, Dynamo's counters and compile times, and the losses. On the CPU (no GPU) the model is compiled by Inductor's CPU backend.

What train_gpt.py would need, found on this project's CPU (torch 2.13), and patched in here:
- its custom ops called as torch.ops.train_gpt.NAME: a CustomOpDef in a traced frame's globals cannot be pickled
  into the cache ("cannot pickle 'torch._C._DispatchModule' object", at compile time);
- one compiled function for each of Block's parts, bound to every block: a wrapper per block loaded the same
  package eleven times into the same globals ("Name '__builtins_dict___6' already exists in scope");
- every region traced while no parameter has a gradient: a frame traced after a backward pass saved, but failed
  to load ("assigned grad expected to be a Tensor or None but got grad of type _Missing"). Hence the forward
  passes first, with the gradients set aside (here none exist yet; in train_gpt.py, Adam's always do).
"""
import sys
import time
import types
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "train_gpt.py").exists())
CUSTOM_OPS = ("softcapped_cross_entropy_fp8", "relu_square_linear", "relu_square_linear_fp8",
              "relu_square_linear_backward", "relu_square_linear_backward_fp8")
PARTS = ("before_attention", "after_attention", "mix_and_mlp")


def main(action, cache, flags):
    plain = "--plain" in flags
    flags = [flag for flag in flags if flag != "--plain"]
    sys.path.insert(0, str(ROOT))
    import torch
    import torch._dynamo.utils as dynamo_utils
    import train_gpt as tg

    torch._dynamo.config.caching_precompile = not plain
    for name in CUSTOM_OPS:
        setattr(tg, name, getattr(torch.ops.train_gpt, name))
    compiled = {}

    def compile_block(block):
        for part in PARTS:
            if part not in compiled:
                compiled[part] = torch.compile(getattr(tg.Block, part), dynamic=False)
            setattr(block, part, types.MethodType(compiled[part], block))
    tg.Block.compile = compile_block

    found = tg.load_compile_cache(cache, 0, print)  # as train_gpt.py does: the caches' folders, the artifacts
    assert found == (action == "load"), (action, cache)
    args = tg.parse_args(flags)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    clock = time.perf_counter()
    model = tg.build_model(args, device, 1)  # on a GPU with its regions wrapped for compilation
    if not cuda:
        tg.compile_regions(model)
    wrapped = time.perf_counter() - clock

    shapes = [tg.train_shape(args, 1, stage) for stage in tg.TRAINING_STAGES]
    starts = tg.stage_starts(args)
    loader = tg.PrefetchLoader(tg.train_source(args, 0, 1, pin_memory=False), device)
    train = [(tg.step_state(starts[i], args), loader.send(shapes[i])[0]) for i in range(len(shapes))]
    source = tg.ValSource(args.val_files, args.val_seq_tokens, args.val_seq_tokens, 0, 1, args.ngram_rows)
    (val_micro,) = tg.PrefetchLoader(source, device).send(tg.BatchShape(args.val_seq_tokens, args.val_seq_tokens, 1))
    val_state = tg.validation_state(0, args)

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    clock = time.perf_counter()
    assert all(p.grad is None for p in model.parameters())
    for state, micro in train:
        model.prepare(state)
        model(micro, state)
    model.prepare(val_state)
    with torch.no_grad():
        model(val_micro, val_state)
    synchronize()
    traced = time.perf_counter() - clock
    clock = time.perf_counter()
    losses = []
    for state, micro in train:
        model.prepare(state)
        losses.append(tg.forward_backward(model, micro, state))
    synchronize()
    passes = time.perf_counter() - clock
    counters = {f"{group}.{key}": value for group, values in dynamo_utils.counters.items()
                for key, value in values.items() if group in ("dynamo_cache", "stats")}
    times = [line for line in dynamo_utils.compile_times(repr="str", aggregate=True).splitlines()
             if any(word in line for word in ("bytecode_tracing", "build_guards", "compile_inner"))]
    print(f"{action}{' plain' if plain else ''}: model and wrap {wrapped:.2f} s, forward passes {traced:.2f} s, forward and "
          f"backward passes {passes:.2f} s, in all {wrapped + traced + passes:.2f} s; {counters}; "
          f"{'; '.join(' '.join(line.split()) for line in times)}; losses "
          f"{[round(loss.item(), 4) for loss in losses]}", flush=True)
    if action == "save":
        tg.save_compile_cache(cache, 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
