"""The embeddings' gradients (add_row_sums, RowLookup's backward) at training shapes, one GPU: a script's kernels at
each tile setting, against autograd's backward of an embedding, which they replace. Prints a table.

    python benchmarks/row_sums.py [--script other/train_gpt.py] [--tiles 64,64,4 32,32,4]
        [--shard data/proxy/proxy_val_000000.bin]

Each row is one table's gradient (the model's width, the vocabulary's rows) for one micro-batch of TOKENS: the
ids sorted once, then add_row_sums into a bf16 table (a value embedding's) or a float32 one (the head's weight,
while tied). The ids are a shard's first tokens, or Zipf-like ones without --shard. Times are a call's GPU time in
microseconds (median_us: replays of a CUDA graph of calls, as training replays its micro-steps); the ratio is
against autograd's backward of F.embedding into the same table (its dense gradient of the table's size, added
into .grad). Tile settings are ROW_SUM_TILES' (WINDOW, COLS, num_warps); none given: the script's own. One
script a process (two copies of train_gpt.py would define its custom ops twice): compare revisions in one call,
one after another.
"""
import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
TOKENS = (16384, 49152)  # the micro-batch of one rank in stage 0 and from stage 2 on, at the 8-GPU shape
VOCAB, WIDTH = 50304, 768


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def median_us(work, calls=10, repeats=20):
    """work's GPU time a call: `calls` of it captured in a CUDA graph, as training runs them, so that no launch
    from the host enters the time; the median over `repeats` replays."""
    for _ in range(3):  # compiles
        work()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            work()
    graph.replay()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def token_ids(tg, shard, tokens):
    if shard:
        ids = tg.read_shard(shard)[:tokens].int()
        if len(ids) < tokens:
            sys.exit(f"error: {shard} holds fewer than {tokens:,} tokens")
        return ids.cuda()
    generator = torch.Generator(device="cuda").manual_seed(0)
    return torch.minimum((VOCAB * torch.rand(tokens, device="cuda", generator=generator) ** 6).int(),
                         torch.tensor(VOCAB - 1, device="cuda"))


def autograd_us(ids, dtype):
    table = torch.nn.Parameter(torch.zeros(VOCAB, WIDTH, device="cuda", dtype=dtype))
    table.grad = torch.zeros_like(table)
    grad = torch.randn(len(ids), WIDTH, device="cuda").bfloat16()

    def backward():
        F.embedding(ids, table).to(torch.bfloat16).backward(grad)
    return median_us(backward)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="train_gpt.py", help="the train_gpt.py copy to time, from the repository")
    parser.add_argument("--tiles", nargs="*", default=[], help="WINDOW,COLS,num_warps settings to try")
    parser.add_argument("--shard", help="a token shard whose first tokens are the ids (else Zipf-like ids)")
    args = parser.parse_args()
    tiles = [dict(zip(("WINDOW", "COLS", "num_warps"), map(int, t.split(",")))) for t in args.tiles]
    tg = load(ROOT / args.script, "timed_train_gpt")
    own = dict(tg.ROW_SUM_TILES)
    print(f"1 × {torch.cuda.get_device_name()}; one table of {VOCAB:,} × {WIDTH} rows; median µs of "
          f"{'the ids of ' + args.shard if args.shard else 'Zipf-like ids'}")
    print("| script | tiles | tokens | table | autograd µs | µs | ratio |")
    print("|---|---|---:|---|---:|---:|---:|")
    for tokens in TOKENS:
        ids = token_ids(tg, args.shard, tokens)
        sorted_ids, order = torch.sort(ids, stable=True)
        grad = torch.randn(tokens, WIDTH, device="cuda").bfloat16()
        for dtype in (torch.bfloat16, torch.float32):
            baseline = autograd_us(ids, dtype)
            out = torch.zeros(VOCAB, WIDTH, device="cuda", dtype=dtype)
            for setting in tiles or [own]:
                tg.ROW_SUM_TILES.clear()
                tg.ROW_SUM_TILES.update(setting)
                us = median_us(lambda: tg.add_row_sums(out, grad, sorted_ids, order))
                label = ",".join(str(setting[k]) for k in ("WINDOW", "COLS", "num_warps"))
                print(f"| {args.script} | {label} | {tokens:,} | {str(dtype)[6:]} | {baseline:.0f} | {us:.0f} | "
                      f"{us / baseline:.3f} |", flush=True)


if __name__ == "__main__":
    main()
