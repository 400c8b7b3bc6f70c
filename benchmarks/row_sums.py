"""The embeddings' gradients (add_row_sums, RowLookup's backward) at training shapes, one GPU: the kernels at each
tile setting, against autograd's backward of an embedding, which they replace. Prints a table.

    python benchmarks/row_sums.py [--baseline old_train_gpt.py] [--tiles 64,64,8 32,64,4 ...]
        [--shard data/proxy/proxy_val_000000.bin]

Each row is one table's gradient (the model's width, the vocabulary's rows) for one micro-batch of TOKENS: the
ids sorted once, then add_row_sums into a bf16 table (a value embedding's) or a float32 one (the head's weight,
while tied). The ids are a shard's first tokens, or Zipf-like ones without --shard. Times are a call's GPU time in
microseconds (mlp_kernel's graphed_ms: replays of a CUDA graph of calls, as training replays its micro-steps);
the ratio is against autograd's backward of F.embedding into the same table (its dense gradient of the table's
size, added into .grad). --tiles are ROW_SUM_TILES settings (WINDOW,COLS,num_warps) to try; none given, the
script's own. --baseline times another revision's add_row_sums, at its own tiles, in the same process (a file:
`git show REV:train_gpt.py > old.py`).
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import train_gpt as tg  # noqa: E402
from benchmarks.ce_kernel import load_module  # noqa: E402
from benchmarks.mlp_kernel import graphed_ms  # noqa: E402

TOKENS = (16384, 49152)  # the micro-batch of one rank in stage 0 and from stage 2 on, at the 8-GPU shape
VOCAB, WIDTH = 50304, 768
CALLS = 10  # a graph's calls


def token_ids(shard, tokens):
    if shard:
        ids = tg.read_shard(shard)[:tokens].int()
        if len(ids) < tokens:
            sys.exit(f"error: {shard} holds fewer than {tokens:,} tokens")
        return ids.cuda()
    generator = torch.Generator(device="cuda").manual_seed(0)
    return torch.minimum((VOCAB * torch.rand(tokens, device="cuda", generator=generator) ** 6).int(),
                         torch.tensor(VOCAB - 1, device="cuda"))


def autograd_us(ids, grad, dtype):
    table = torch.nn.Parameter(torch.zeros(VOCAB, WIDTH, device="cuda", dtype=dtype))
    table.grad = torch.zeros_like(table)
    return 1000 * graphed_ms(lambda: F.embedding(ids, table).to(torch.bfloat16).backward(grad), CALLS)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="another train_gpt.py whose kernels to time alongside")
    parser.add_argument("--tiles", nargs="*", default=[], help="WINDOW,COLS,num_warps settings to try")
    parser.add_argument("--shard", help="a token shard whose first tokens are the ids (else Zipf-like ids)")
    args = parser.parse_args()
    tiles = [dict(zip(("WINDOW", "COLS", "num_warps"), map(int, t.split(",")))) for t in args.tiles]
    runs = [("train_gpt.py", tg, tiles or [dict(tg.ROW_SUM_TILES)])]
    if args.baseline:
        baseline = load_module(args.baseline)
        runs.append((f"baseline {args.baseline}", baseline, [dict(baseline.ROW_SUM_TILES)]))
    print(f"1 × {torch.cuda.get_device_name()}; one table of {VOCAB:,} × {WIDTH} rows; µs a call, "
          f"{'the ids of ' + args.shard if args.shard else 'Zipf-like ids'}")
    print("| script | tiles | tokens | table | autograd µs | µs | ratio |")
    print("|---|---|---:|---|---:|---:|---:|")
    for tokens in TOKENS:
        ids = token_ids(args.shard, tokens)
        sorted_ids, order = torch.sort(ids, stable=True)
        grad = torch.randn(tokens, WIDTH, device="cuda").bfloat16()
        for dtype in (torch.bfloat16, torch.float32):
            reference = autograd_us(ids, grad, dtype)
            out = torch.zeros(VOCAB, WIDTH, device="cuda", dtype=dtype)
            for name, module, settings in runs:
                for setting in settings:
                    module.ROW_SUM_TILES.clear()
                    module.ROW_SUM_TILES.update(setting)
                    us = 1000 * graphed_ms(lambda: module.add_row_sums(out, grad, sorted_ids, order), CALLS)
                    label = ",".join(str(setting[k]) for k in ("WINDOW", "COLS", "num_warps"))
                    print(f"| {name} | {label} | {tokens:,} | {str(dtype)[6:]} | {reference:.0f} | {us:.0f} | "
                          f"{us / reference:.3f} |", flush=True)


if __name__ == "__main__":
    main()
