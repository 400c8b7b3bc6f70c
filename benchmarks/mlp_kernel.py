"""The MLP with its activation fused into the matmul kernels (train_gpt.ReluSquareMLP), in bf16 and
in FP8, against the unfused one that Inductor compiles, on one GPU, at each training stage's micro-batch
(768 -> 3072 -> 768, bf16 activations): forward and forward + backward time (medians of CUDA-event timings),
and the error of the output and of the three gradients against float64. Prints a table.

A second table times the kernels alone, each tile on its own, replayed from a CUDA graph so that Python's
launches stay out (the training steps replay graphs too): the forward relu(x fc^T)^2 and the backward
(g proj) 2 sqrt(post), each in bf16 and in FP8, against the same matmul in cuBLAS without the activation.

    python benchmarks/mlp_kernel.py [--tiles 128,128,64,8,4,8 ...] [--fp8_tiles 128,128,128,8,4,8 ...] [--reps 20]

A tile is BM,BN,BK,num_warps,num_stages,GROUP (train_gpt.MLP_TILES): --tiles for the bf16 kernels, --fp8_tiles
for the FP8 ones (in the whole MLP, each FP8 tile serves its forward and its backward kernel).
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import train_gpt as tg  # noqa: E402

TILES = ["128,128,64,8,4,8", "128,256,64,8,3,8", "128,128,64,4,4,8", "64,256,64,4,4,8", "256,128,64,8,3,8"]
FP8_TILES = ["128,128,128,8,4,8", "128,256,128,8,3,8", "128,128,128,4,4,8", "256,128,128,8,3,8"]
TOKENS = (16384, 32768, 49152)  # the micro-batches of the three training stages


def unfused_mlp(x, fc, proj):
    return F.linear(F.relu(F.linear(x, fc.type_as(x))).square(), proj.type_as(x))


def fused_mlp(x, fc, proj):
    return tg.ReluSquareMLP.apply(x, fc.type_as(x), proj.type_as(x), False)


def fused_fp8_mlp(x, fc, proj):
    return tg.ReluSquareMLP.apply(x, fc.type_as(x), proj.type_as(x), True)


def set_tile(dtype, tile):
    BM, BN, BK, warps, stages, group = map(int, tile.split(","))
    tg.MLP_TILES[dtype] = dict(BM=BM, BN=BN, BK=BK, num_warps=warps, num_stages=stages, GROUP=group)


def median_ms(fn, reps, rounds=5):
    """The median over rounds of the mean time of reps calls queued back to back (the host runs ahead, as
    it does in training, so launch gaps stay out)."""
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def graphed_ms(fn, reps):
    """The median over 5 replays of a CUDA graph of reps calls of fn, per call."""
    fn()  # builds the kernel before the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    return median_ms(graph.replay, 1) / reps


def kernel_rows(tokens, fc, proj, tiles, fp8_tiles, reps):
    """(tokens, kernel, tile, ms, cuBLAS ms) for each tile of each kernel, as training calls them: forward bf16,
    forward FP8 (post in e4m3 in both layouts, no bf16 copy), backward bf16, backward FP8 (from post in e4m3,
    the hidden gradient in e5m2 in both layouts, no bf16 copy)."""
    x = tg.rms_norm(torch.randn(tokens, fc.size(1), device="cuda")).bfloat16()
    g = torch.randn(tokens, fc.size(1), device="cuda", dtype=torch.bfloat16)
    fc16, proj16 = fc.detach().bfloat16(), proj.detach().bfloat16()
    post = F.relu(F.linear(x, fc16)).square()
    (x8, x_scale), (fc8, fc_scale) = tg.normed_e4m3(x), tg.to_fp8_at_amax(fc16)
    g8, proj8_t = g.to(torch.float8_e5m2), tg.to_fp8_at_amax(proj16)[0].T.contiguous()
    one = torch.ones((), device="cuda")
    out = torch.empty_like(post)
    e4, e5 = (tg.fp8_and_transposed(post, *post.shape, dtype) for dtype in (torch.float8_e4m3fn, torch.float8_e5m2))
    kernels = [
        ("forward, bf16", torch.bfloat16, tiles, lambda: tg.relu_square_matmul(x, fc16.T, out),
         lambda: F.linear(x, fc16)),
        ("forward, FP8", torch.float8_e4m3fn, fp8_tiles,
         lambda: tg.relu_square_matmul(x8, fc8.T, scale=x_scale * fc_scale, copy=e4[0], copy_t=e4[1], copy_scale=one),
         lambda: torch._scaled_mm(x8, fc8.T, one, one, out_dtype=torch.bfloat16)),
        ("backward, bf16", torch.bfloat16, tiles, lambda: tg.relu_square_matmul(g, proj16, out, post),
         lambda: g @ proj16),
        ("backward, FP8", torch.float8_e5m2, fp8_tiles,
         lambda: tg.relu_square_matmul(g8, proj8_t.T, post=e4[0], scale=one, copy=e5[0], copy_t=e5[1], copy_scale=one),
         lambda: torch._scaled_mm(g8, proj8_t.T, one, one, out_dtype=torch.bfloat16)),
    ]
    rows = []
    for name, dtype, kernel_tiles, fused, cublas in kernels:
        reference = graphed_ms(cublas, reps)
        for tile in kernel_tiles:
            set_tile(dtype, tile)
            try:
                rows.append((tokens, name, tile, graphed_ms(fused, reps), reference))
            except Exception as error:  # a tile too large for the chip's shared memory, say: the others go on
                print(f"{name} tile {tile} at {tokens} tokens failed: {type(error).__name__}: {error}",
                      file=sys.stderr)
    return rows


def measure(mlp, x, fc, proj, grad, reps):
    """(forward ms, forward + backward ms, largest error of output and gradients against float64)."""
    def forward():
        return mlp(x, fc, proj)

    def forward_backward():
        torch.autograd.grad(mlp(x, fc, proj), (x, fc, proj), grad)

    for _ in range(3):  # compiles, autotunes Inductor's kernels, builds Triton's
        forward_backward()
    ms = median_ms(forward, reps), median_ms(forward_backward, reps)
    out = mlp(x, fc, proj)
    got = (out, *torch.autograd.grad(out, (x, fc, proj), grad))
    ref_inputs = [t.detach().double().requires_grad_() for t in (x, fc, proj)]
    ref = unfused_mlp(*ref_inputs)
    want = (ref, *torch.autograd.grad(ref, ref_inputs, grad.double()))
    error = max(((a.double() - b).norm() / b.norm()).item() for a, b in zip(got, want))
    return (*ms, error)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiles", nargs="+", default=TILES, help="bf16: BM,BN,BK,num_warps,num_stages,GROUP each")
    parser.add_argument("--fp8_tiles", nargs="+", default=FP8_TILES, help="FP8: the same, each")
    parser.add_argument("--reps", type=int, default=20, help="calls per timed round (the median of 5 rounds' means)")
    args = parser.parse_args()
    torch.manual_seed(0)
    dim = 768
    fc = torch.empty(4 * dim, dim, device="cuda").uniform_(-0.5 * 3**0.5 * dim**-0.5, 0.5 * 3**0.5 * dim**-0.5)
    proj = 0.02 * torch.randn(dim, 4 * dim, device="cuda")  # zero at initialisation; not here, so x gets a gradient
    fc.requires_grad_(), proj.requires_grad_()
    unfused, fused, fused_fp8 = (torch.compile(f, dynamic=False) for f in (unfused_mlp, fused_mlp, fused_fp8_mlp))
    chosen = dict(tg.MLP_TILES)
    kernels = [row for tokens in TOKENS for row in kernel_rows(tokens, fc, proj, args.tiles, args.fp8_tiles, args.reps)]
    tg.MLP_TILES.update(chosen)
    rows = []
    for tokens in TOKENS:
        x = tg.rms_norm(torch.randn(tokens, dim, device="cuda")).bfloat16().requires_grad_()
        grad = torch.randn(tokens, dim, device="cuda", dtype=torch.bfloat16)
        base = measure(unfused, x, fc, proj, grad, args.reps)
        rows.append((tokens, "unfused (Inductor)", "", *base, base))
        variants = [(fused, "fused", torch.bfloat16, tile) for tile in args.tiles]
        variants += [(fused_fp8, "fused, FP8", torch.float8_e4m3fn, tile) for tile in args.fp8_tiles]
        for mlp, kind, dtype, tile in variants:
            set_tile(dtype, tile)
            if dtype == torch.float8_e4m3fn:  # the backward's kernel takes the same tile
                set_tile(torch.float8_e5m2, tile)
            try:
                rows.append((tokens, kind, tile, *measure(mlp, x, fc, proj, grad, args.reps), base))
            except Exception as error:  # a tile too large for the chip's shared memory, say: the others go on
                print(f"{kind} tile {tile} at {tokens} tokens failed: {type(error).__name__}: {error}",
                      file=sys.stderr)
    print("| tokens | kernel | tile | ms | cuBLAS matmul alone ms | vs cuBLAS |")
    print("|---:|---|---|---:|---:|---:|")
    for tokens, name, tile, ms, reference in kernels:
        print(f"| {tokens} | {name} | {tile} | {ms:.3f} | {reference:.3f} | {ms / reference:.3f} |")
    print()
    print("| tokens | MLP | tile | forward ms | vs unfused | fwd + bwd ms | vs unfused | error vs float64 |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for tokens, kind, tile, fwd, both, error, (base_fwd, base_both, _) in rows:
        print(f"| {tokens} | {kind} | {tile} | {fwd:.3f} | {fwd / base_fwd:.3f} | {both:.3f} | {both / base_both:.3f} "
              f"| {error:.1e} |")


if __name__ == "__main__":
    main()
