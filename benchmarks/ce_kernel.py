"""The head's loss kernels (train_gpt.softcapped_cross_entropy_fp8: the row sums, then the e5m2 gradient in both
layouts) at each training stage's micro-batch and loss terms, on one GPU: time per call (median of 5 rounds of
back-to-back calls), bytes moved per second against the least the work needs (the bf16 logits read twice,
the gradient written twice), and agreement with the reference formula (softcapped_cross_entropy cast to
e5m2: share of gradient bytes that differ, the largest difference in e5m2 rounding steps, the loss's
relative error, whether the transposed copy is exact). Prints a table.

    python benchmarks/ce_kernel.py [--baseline old_train_gpt.py] [--sums 4,2048,8 ...] [--gradient 64,128,8 ...]

--baseline times another revision's softcapped_cross_entropy_fp8 in the same process (a file: `git show
REV:train_gpt.py > old.py`). --sums and --gradient are tiles to try for CE_TILES (ROWS,COLS,num_warps each),
each with the other kernel's first.
"""
import argparse
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import train_gpt as tg  # noqa: E402
from benchmarks.mlp_kernel import median_ms  # noqa: E402

V = 50304
STAGES = ((16384, 4), (32768, 3), (49152, 1))  # micro-batch tokens and loss terms: mtp and prefix columns


def load_module(path):
    """Another train_gpt.py as a module, its operators renamed (torch registers an operator's name once)."""
    module = types.ModuleType("baseline_train_gpt")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # dataclasses look their class's module up there
    source = Path(path).read_text().replace('"train_gpt::', '"baseline_train_gpt::')
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def inputs(tokens, terms):
    """Logits of the spread training sees at first, next-token targets and the further columns: tokens on
    (running out at the end) and, as the fourth, the next token's prefix token."""
    logits = (4 * torch.randn(tokens, V, device="cuda")).bfloat16()
    nxt = torch.randint(0, V, (tokens,), device="cuda", dtype=torch.int32)
    columns = [F.pad(nxt[k:], (0, k), value=-1) for k in range(min(terms, 3))]
    if terms == 4:
        columns.append(tg.load_prefix_table("data/gpt2_prefix_tokens.npy", V).cuda()[nxt.long()])
    weights = torch.tensor([1.0, 0.5, 0.25, 0.25][:terms], device="cuda")
    return logits, torch.stack(columns, dim=1).contiguous(), weights


def agreement(call, logits, targets, weights, rows=8192):
    """(bytes that differ, largest difference in rounding steps, loss's relative error, transpose exact) of
    call(logits, targets, weights) on the first rows, against the reference formula."""
    logits, targets = logits[:rows], targets[:rows]
    loss, grad, grad_t = call(logits, targets, weights)
    ref_loss, ref_grad = tg.softcapped_cross_entropy(logits, targets, weights)
    ref_grad = (ref_grad / tg.HEAD_GRAD_SCALE).to(torch.float8_e5m2).float()
    steps = (grad.float() - ref_grad).abs() / (ref_grad.abs() * 0.25 + 2**-14)  # e5m2 keeps 2 mantissa bits
    return ((grad.float() != ref_grad).float().mean().item(), steps.max().item(),
            abs(loss.item() / ref_loss.item() - 1), torch.equal(grad_t.T.view(torch.uint8), grad.view(torch.uint8)))


def tile(text):
    rows, cols, warps = map(int, text.split(","))
    return dict(ROWS=rows, COLS=cols, num_warps=warps)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="another train_gpt.py whose kernels to time alongside")
    parser.add_argument("--sums", nargs="+", default=[], help="row-sum tiles to try: ROWS,COLS,num_warps")
    parser.add_argument("--gradient", nargs="+", default=[], help="gradient tiles to try: ROWS,COLS,num_warps")
    parser.add_argument("--reps", type=int, default=20, help="calls per timed round (the median of 5 rounds' means)")
    args = parser.parse_args()
    torch.manual_seed(0)
    chosen = {kind: dict(t) for kind, t in tg.CE_TILES.items()}
    variants = [("train_gpt.py", chosen)]
    variants += [(f"sums {t}", {**chosen, "sums": tile(t)}) for t in args.sums]
    variants += [(f"gradient {t}", {**chosen, "gradient": tile(t)}) for t in args.gradient]
    baseline = load_module(args.baseline) if args.baseline else None
    rows = []
    for tokens, terms in STAGES:
        logits, targets, weights = inputs(tokens, terms)
        least_bytes = 2 * logits.numel() * 2 + 2 * logits.numel()
        runs = [(f"baseline {args.baseline}", baseline.softcapped_cross_entropy_fp8)] if baseline else []
        runs += [(name, tiles) for name, tiles in variants]
        first = None
        for name, run in runs:
            call = run if callable(run) else tg.softcapped_cross_entropy_fp8
            tg.CE_TILES.update(chosen if callable(run) else run)
            ms = median_ms(lambda: call(logits, targets, weights), args.reps)  # noqa: B023
            first = first or ms
            rows.append((tokens, terms, name, ms, ms / first, least_bytes / ms / 1e9,
                         *agreement(call, logits, targets, weights)))
        tg.CE_TILES.update(chosen)
    print(f"{torch.cuda.get_device_name()}, vocabulary {V}; 'vs first' against the first row of each micro-batch")
    print("| tokens | terms | kernels | ms | vs first | TB/s of the least bytes | bytes differ | most steps | "
          "loss rel. error | transpose exact |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for tokens, terms, name, ms, ratio, tbs, differ, steps, loss_error, exact in rows:
        print(f"| {tokens} | {terms} | {name} | {ms:.3f} | {ratio:.3f} | {tbs:.2f} | {differ:.1e} | {steps:.2f} | "
              f"{loss_error:.1e} | {exact} |")


if __name__ == "__main__":
    main()
