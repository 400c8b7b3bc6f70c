"""train_gpt.py's maths at tiny sizes on the CPU: orthogonalisation, rotary, attention, NorMuon (also over
several processes), the model, the command line, the schedules, and the CPU smoke run."""
import copy
import dataclasses
import functools
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounter

import train_gpt as tg
from conftest import (environment_without_cache_dirs, gradients_as_hooks_see_them, micro_batch,
                      randomise_zero_initialised, read_log, rel_error, sorting_order)

ROOT = Path(__file__).resolve().parent.parent
SMOKE = tg.parse_args(["--smoke"])


# ----------------------------------------------------------------------------------------------------
# orthogonalize
#
# The bound verified: Polar Express maps a singular value s of G / (1.02 |G|_F) through five odd quintics
# (tg.POLAR_EXPRESS). In exact arithmetic every s >= 1e-3 * 1.02 ends in [0.85, 1.15], while smaller s stay
# small (the product of the linear coefficients is about 990). So: every output singular value is at most
# 1.5, and every one below 0.5 is accounted for by an input singular value below 2e-3 |G|_F. Random square
# matrices have a few of those; 4:1 ones do not.

TINY = 2e-3


def singular_values(x):
    return torch.linalg.svdvals(x.double())


@pytest.mark.parametrize("shape", [(128, 128), (512, 128), (128, 512), (2, 3, 128, 128)])
def test_orthogonalize_gaussian_matrices(shape):
    G = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    X = tg.orthogonalize(G)
    assert X.shape == G.shape
    s_in = singular_values(G / G.norm(dim=(-2, -1), keepdim=True))
    s_out = singular_values(X)
    assert s_out.max() <= 1.5
    assert ((s_out < 0.5).sum(-1) <= (s_in < TINY).sum(-1)).all()
    if shape[-1] != shape[-2]:  # 4:1 matrices are well conditioned: nothing is excused
        assert s_out.min() >= 0.5


@pytest.mark.parametrize("rows, cols", [(96, 96), (384, 96), (96, 384)])
def test_orthogonalize_spread_spectrum_approaches_the_polar_factor(rows, cols):
    """Singular values spread over two decades, all at least 2e-3 of the Frobenius norm."""
    g = torch.Generator().manual_seed(1)
    n = min(rows, cols)
    U = torch.linalg.qr(torch.randn(rows, n, generator=g, dtype=torch.float64))[0]
    V = torch.linalg.qr(torch.randn(cols, n, generator=g, dtype=torch.float64))[0]
    s = torch.logspace(0, -2, n, dtype=torch.float64)
    G = U @ torch.diag(s) @ V.T
    assert s.min() / s.norm() >= TINY
    X = tg.orthogonalize(G.float())
    s_out = singular_values(X)
    assert X.shape == G.shape and s_out.min() >= 0.5 and s_out.max() <= 1.5
    polar = U @ V.T
    cosine = (X.double() * polar).sum() / (X.double().norm() * polar.norm())
    assert cosine > 0.95


def polar_express_float64(G):
    """The same iteration as tg.orthogonalize in float64: what bf16 arithmetic approximates."""
    X = G.double()
    wide = X.size(-2) <= X.size(-1)
    X = X if wide else X.mT
    X = X / (1.02 * X.norm(dim=(-2, -1), keepdim=True) + 1e-6)
    for a, b, c in tg.POLAR_EXPRESS:
        A = X @ X.mT
        X = a * X + (b * A + c * A @ A) @ X
    return X if wide else X.mT


def test_polar_express_coefficients_map_the_spectrum_near_one():
    """The five quintics composed, in float64, on singular values over three decades: a mistyped
    coefficient leaves this band."""
    s = torch.logspace(-3, 0, 100_001, dtype=torch.float64) / 1.02
    x = s.clone()
    for a, b, c in tg.POLAR_EXPRESS:
        x = a * x + b * x**3 + c * x**5
    assert 0.84 < x.min() and x.max() < 1.15


@pytest.mark.parametrize("shape", [(96, 96), (256, 64), (64, 256), (3, 64, 64)])
def test_orthogonalize_is_polar_express_in_bf16(shape):
    """bf16 rounding, amplified by coefficients up to 22, leaves a few percent between the two."""
    G = torch.randn(shape, generator=torch.Generator().manual_seed(7))
    assert rel_error(tg.orthogonalize(G), polar_express_float64(G)) < 0.08


@pytest.mark.parametrize("shape", [(32, 16), (16, 32), (2, 24, 24)])
def test_normalize_neurons_against_float64_formula(shape):
    """Each neuron (a row of a tall or square matrix, a column of a wide one) divided by the root of its running
    mean square, the whole rescaled to X's Frobenius norm; the second moment updated as 0.9 v + 0.1 q."""
    g = torch.Generator().manual_seed(8)
    rows, cols = shape[-2:]
    neuron_dim = -1 if rows >= cols else -2
    v = torch.rand(torch.randn(shape).mean(dim=neuron_dim, keepdim=True).shape, generator=g) + 0.5
    X = torch.randn(shape, generator=g)
    v_ref = 0.9 * v.double() + 0.1 * X.double().square().mean(dim=neuron_dim, keepdim=True)
    Y = X.double() / v_ref.sqrt()
    ref = Y * X.double().norm(dim=(-2, -1), keepdim=True) / Y.norm(dim=(-2, -1), keepdim=True)
    out = tg.normalize_neurons(X, v)
    assert rel_error(v, v_ref) < 1e-6 and rel_error(out, ref) < 1e-6
    assert not torch.allclose(out, X)  # it did change something


# ----------------------------------------------------------------------------------------------------
# Rotary and attention


def test_rotary_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    T, H, D = 300, 2, 32
    rotary = tg.Rotary(D, max_len=T)
    q = rotary(torch.randn(H, D).expand(T, H, D))  # the same query and key vectors at every position
    k = rotary(torch.randn(H, D).expand(T, H, D))
    scores = torch.einsum("ihd,jhd->hij", q.double(), k.double())
    shift = 37
    assert torch.allclose(scores[:, shift:, shift:], scores[:, :-shift, :-shift], atol=1e-3)
    assert (scores[:, 0, :].max() - scores[:, 0, :].min()) > 1  # and they do depend on it


def test_yarn_stretch_follows_the_record():
    """The record's long windows 384 -> 896 -> 1408 -> 1664 tokens: attention scales 0.1, 0.11695, 0.12752,
    0.13178; a frequency that turns 32 times or more over the old window is kept, one that turns less than
    once is slowed by old / new; the zero frequencies stay zero; going back to one window undoes it all."""
    rotary = tg.Rotary(128, max_len=64)
    base = rotary.freqs.clone()
    scales = []
    for windows in [(384,), (384, 896), (384, 896, 1408), (384, 896, 1408, 1664)]:
        rotary.stretch(windows)
        scales.append(rotary.scale)
    assert scales == pytest.approx([0.1, 0.11695, 0.12752, 0.13178], abs=5e-5)
    rotary.stretch((384, 896))
    turns = 384 * base / (2 * math.pi)
    fast, slow = turns >= 32, (turns < 1) & (base > 0)
    assert fast.any() and slow.any()
    assert torch.allclose(rotary.freqs[fast], base[fast])
    assert torch.allclose(rotary.freqs[slow], base[slow] * 384 / 896)
    assert (rotary.freqs[base == 0] == 0).all() and (rotary.freqs <= base).all()
    assert torch.allclose(rotary.cos[5], torch.cos(5 * rotary.freqs))
    rotary.stretch((384,))
    assert torch.equal(rotary.freqs, base) and rotary.scale == 0.1


def naive_attention(q, k, v, cu_seqlens, window):
    """Causal sliding-window attention inside each document, one query at a time, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    out = torch.zeros_like(q)
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds, bounds[1:]):
        for i in range(start, end):
            keys = slice(max(start, i - window + 1), i + 1)
            for h in range(q.size(1)):
                logits = SCALE * (k[keys, h] @ q[i, h])
                out[i, h] = torch.softmax(logits, 0) @ v[keys, h]
    return out


CU_SEQLENS = [[0, 80], [0, 1, 30, 31, 80], [0, 20, 40, 60, 80], [0, 79, 80]]
SCALE = 0.12


def random_qkv(T=80, H=2, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [4 * torch.randn(T, H, D, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize("cu", CU_SEQLENS)
@pytest.mark.parametrize("window", [1, 7, 64, 1000])
def test_dense_attention_matches_naive_reference(cu, window):
    q, k, v = random_qkv()
    cu = torch.tensor(cu, dtype=torch.int32)
    assert torch.allclose(tg.dense_attention(q, k, v, cu, window, SCALE), naive_attention(q, k, v, cu, window),
                          rtol=0, atol=1e-10)


@pytest.mark.parametrize("window", [7, 1000])
def test_dense_attention_sees_neither_other_documents_nor_the_future(window):
    q, k, v = random_qkv()
    cu = torch.tensor([0, 30, 55, 80], dtype=torch.int32)
    before = tg.dense_attention(q, k, v, cu, window, SCALE)
    # a token of the second document: the first and the third are untouched, and so are earlier positions
    # of the second; then a token of the third: everything before it is untouched
    for changed, untouched in ((40, [slice(0, 40), slice(55, 80)]), (75, [slice(0, 75)])):
        q2, k2, v2 = (t.clone() for t in (q, k, v))
        for t in (q2, k2, v2):
            t[changed] += 1
        after = tg.dense_attention(q2, k2, v2, cu, window, SCALE)
        assert not torch.allclose(after[changed], before[changed])
        for positions in untouched:
            assert torch.equal(after[positions], before[positions])


# ----------------------------------------------------------------------------------------------------
# NorMuon and Adam

MUON_SHAPES = [((3, 16, 16), 5), ((64, 16), 4), ((16, 64), 3)]  # (shape, matrices of that shape)
MUON_LR, MUON_WD, MUON_MOMENTUM, MUON_STEPS = 0.02, 1.2, 0.9, 3


def muon_parameters():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=g) for shape, count in MUON_SHAPES for _ in range(count)]


def gradient_shares(step, world_size):
    """For each parameter: world_size random tensors whose sum is that step's gradient."""
    g = torch.Generator().manual_seed(100 + step)
    shares = []
    for shape, count in MUON_SHAPES:
        for _ in range(count):
            shares.append([torch.randn(shape, generator=g) for _ in range(world_size)])
    return shares


def make_normuon(params, world_size):
    """NorMuon over `params`, named as hidden matrices of the model so that the parameter table's default
    matrix row applies."""
    named = [(f"blocks.{i}.weight", p) for i, p in enumerate(params)]
    opt = tg.NorMuon(named, lr=MUON_LR, wd=MUON_WD, world_size=world_size)
    for group in opt.param_groups:
        group["momentum"] = MUON_MOMENTUM
    return opt


def run_muon(rank, world_size, num_shares):
    """MUON_STEPS steps of NorMuon as rank `rank` of world_size; one process takes the sum of all shares."""
    params = [p.requires_grad_() for p in muon_parameters()]
    opt = make_normuon(params, world_size)
    for step in range(MUON_STEPS):
        for p, shares in zip(params, gradient_shares(step, num_shares)):
            p.grad = shares[rank] if world_size > 1 else sum(shares)
        opt.step()
    return [p.detach() for p in params]


def contiguous_only(collective):
    """collective, refusing non-contiguous tensors as NCCL does (ValueError); gloo copies them, so a
    transposed update (a tall matrix's, from orthogonalize) passed here and failed on 2 H100s."""
    @functools.wraps(collective)
    def checked(*args, **kwargs):
        for t in (*args, *kwargs.values()):
            if isinstance(t, torch.Tensor) and not t.is_contiguous():
                raise ValueError(f"{collective.__name__}: tensors must be contiguous")
        return collective(*args, **kwargs)
    return checked


def gloo_worker(rank, world_size, port, out_dir, runs):
    """Rank `rank` of a gloo group: for each function `run` of `runs`, one after another, saves
    run(rank, world_size, world_size) to out_dir/<its name>_rank<rank>.pt. Collectives refuse non-contiguous
    tensors, as NCCL does."""
    torch.set_num_threads(1)
    for name in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "all_reduce", "broadcast"):
        setattr(dist, name, contiguous_only(getattr(dist, name)))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        for run in runs:
            torch.save(run(rank, world_size, world_size), Path(out_dir) / f"{run.__name__}_rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gloo_runs(tmp_path_factory):
    """gloo_runs(run, world_size): what `run` returned on each rank of a gloo group of world_size processes. The
    processes are started once for every run of GLOO_RUNS[world_size], the first time one of them is asked for:
    each process imports torch and this module, which took longer than most runs (4 processes on 2 cores: 12 s)."""
    folders = {}

    def results(run, world_size):
        runs = GLOO_RUNS[world_size]
        assert run in runs
        if world_size not in folders:
            folder = tmp_path_factory.mktemp(f"gloo_{world_size}")
            mp.spawn(gloo_worker, args=(world_size, free_port(), str(folder), runs), nprocs=world_size)
            folders[world_size] = folder
        return [torch.load(folders[world_size] / f"{run.__name__}_rank{rank}.pt") for rank in range(world_size)]
    return results


@pytest.mark.parametrize("world_size", [2, 4])
def test_distributed_normuon_equals_single_process(world_size, gloo_runs):
    """Groups of 5, 4 and 3 matrices: 5 and 3 are not multiples of 2 or 4, so shares are padded."""
    single = run_muon(0, 1, world_size)
    initial = muon_parameters()
    for params in gloo_runs(run_muon, world_size):
        assert len(params) == len(single)
        for p, q, p0 in zip(params, single, initial):
            assert (q - p0).abs().max() > MUON_LR / 10  # the steps did move the parameters
            assert rel_error(p - p0, q - p0) < 2e-2  # the updates agree to bf16 rounding


SCHEDULE = [(MUON_LR, MUON_MOMENTUM), (MUON_LR / 2, 0.95), (MUON_LR / 4, 0.8)]  # (lr, momentum) per step


def run_normuon_scheduled(params):
    """NorMuon over `params` for the steps of SCHEDULE, on the gradients of gradient_shares; the parameters after."""
    opt = make_normuon(params, 1)
    for step, (lr, momentum) in enumerate(SCHEDULE):
        for group in opt.param_groups:
            group["lr"], group["momentum"] = lr, momentum
        for p, shares in zip(params, gradient_shares(step, 1)):
            p.grad = sum(shares).to(p.device)
        opt.step()
    return opt


def test_normuon_step_against_float64_formula():
    """Three steps, each at its own learning rate and momentum (the schedule's values are read every step),
    by hand in float64: Nesterov momentum, Polar Express, per-neuron normalisation, the learning rate scaled
    by sqrt(max(1, rows / cols)), cautious decay lr * wd * lr where X and p agree."""
    params = [p.requires_grad_() for p in muon_parameters()]
    ref = [p.detach().double().clone() for p in params]
    momenta = [torch.zeros_like(p) for p in ref]
    moments = [None] * len(ref)
    run_normuon_scheduled(params)
    for step, (base_lr, momentum) in enumerate(SCHEDULE):
        grads = [sum(shares) for shares in gradient_shares(step, 1)]
        for i, (p, g) in enumerate(zip(ref, grads)):
            rows, cols = p.shape[-2:]
            momenta[i] = momentum * momenta[i] + (1 - momentum) * g.double()
            X = polar_express_float64((1 - momentum) * g.double() + momentum * momenta[i])
            q = X.square().mean(dim=-1 if rows >= cols else -2, keepdim=True)
            moments[i] = 0.1 * q if moments[i] is None else 0.9 * moments[i] + 0.1 * q
            Y = X / moments[i].sqrt()
            Y = Y * X.norm(dim=(-2, -1), keepdim=True) / Y.norm(dim=(-2, -1), keepdim=True)
            lr = base_lr * max(1, rows / cols) ** 0.5
            p -= lr * MUON_WD * base_lr * p * (Y * p >= 0) + lr * Y
    for p, q, p0 in zip(params, ref, muon_parameters()):
        assert rel_error(p.detach() - p0, q - p0.double()) < 0.08  # bf16 Polar Express, as above


def test_normuon_reset_is_a_fresh_normuon():
    """The warm-up keeps NorMuon, as its CUDA graphs hold its state where it is, and resets it: from the same
    weights and gradients, its next step must equal a new optimizer's first."""
    params = [p.requires_grad_() for p in muon_parameters()]
    used = run_normuon_scheduled(params)
    fresh_params = [p.detach().clone().requires_grad_() for p in params]
    used.reset()
    for opt, matrices in ((used, params), (make_normuon(fresh_params, 1), fresh_params)):
        for group in opt.param_groups:
            group["lr"], group["momentum"] = SCHEDULE[0]
        for p, shares in zip(matrices, gradient_shares(0, 1)):
            p.grad = sum(shares)
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(params, fresh_params))


# sizes 66048 (sharded: ADAM_SHARD_MIN or more, a multiple of 2 and 4), 66045 (as many, but no multiple of 2 or 4:
# summed whole), 7, 2 and 16 (summed whole)
ADAM_SHAPES = [(256, 258), (259, 255), (7,), (2,), (4, 4)]


def run_adam(rank, world_size, num_shares, device="cpu"):
    """Four steps of sharded Adam (rank `rank` of world_size) on ADAM_SHAPES, the untie hand-over after the
    second, one small parameter without a gradient in the first (the ranks sum zeros for it, one process
    skips it); one process takes the sum of all shares. The parameters on `device`, returned on the CPU."""
    g = torch.Generator().manual_seed(5)
    params = [torch.randn(shape, generator=g).to(device).requires_grad_() for shape in ADAM_SHAPES]
    untied = torch.zeros(ADAM_SHAPES[0], device=device).requires_grad_()
    names = ["head.weight", "scalar_d", "scalar_a", "scalar_b", "scalar_c"]
    adam = tg.Adam(list(zip(names, params)) + [("embed.weight", untied)], lr=0.01, wd=2.0, world_size=world_size)
    for group in adam.param_groups:
        group["lr_mul"] = 1.0
    for step in range(4):
        if step == 2:
            adam.untie(params[0])
        grads = torch.Generator().manual_seed(200 + step)
        for p in params[: 4 if step == 0 else 5] + ([untied] if step >= 2 else []):  # scalar_c: no gradient at first
            shares = [torch.randn(p.shape, generator=grads) for _ in range(num_shares)]
            p.grad = (shares[rank] if world_size > 1 else sum(shares)).to(device)
        adam.step()
        adam.zero_grad(set_to_none=True)
    return [p.detach().cpu() for p in params + [untied]]


@pytest.mark.parametrize("world_size", [2, 4])
def test_sharded_adam_equals_single_process(world_size, gloo_runs):
    """Each rank updates a slice of the large parameters in place and they are gathered in place, and every rank
    updates the small ones whole from one all-reduce, with a large one that does not divide into equal slices:
    every rank must end with the parameters one process computes from the summed gradients, the untied copy
    included."""
    single = run_adam(0, 1, world_size)
    adam = tg.Adam([("head.weight", single[0])], lr=0.1, wd=0.0)
    adam.world_size = world_size  # as a rank of world_size, without a process group
    assert [adam.sharded(p) for p in single] == [True, False, False, False, False, True]
    for params in gloo_runs(run_adam, world_size):
        assert len(params) == len(single)
        for p, q in zip(params, single):
            assert torch.allclose(p, q, rtol=0, atol=1e-6)
    assert not torch.allclose(single[0], single[-1])  # the untied copy went its own way


def run_reductions(rank, world_size, num_shares):
    """The untied smoke model's backward pass over micro-batch `rank` of num_shares (one process: all of them,
    accumulated), its reductions started by start_reductions. Returns what this rank's optimizers would step
    on, waited for: {matrix name: its summed gradient} for NorMuon's matrices of this rank,
    {name: (first element, summed gradient of this rank's slice)} for Adam's parameters."""
    args = tg.parse_args(["--smoke"])
    model = tg.build_model(args, torch.device("cpu"), world_size)
    randomise_zero_initialised(model)
    adam, normuon, row_adam = optimizers = tg.make_optimizers(model, args, world_size)
    events = model.grad_events or tg.GradientEvents(normuon.reduction_groups() + adam.reduction_groups())
    source = tg.TrainSource(args.train_files, rank, world_size, repeat=True, ngram_rows=args.ngram_rows)
    for micro in next(tg.synchronous_batches(source, [tg.BatchShape(768, 512, num_shares // world_size)])):
        tg.forward_backward(model, micro, tg.StepState((128, 256), (256,), tied=False))
    tg.start_reductions([normuon, adam], events)
    names, received = {p: n for n, p in model.named_parameters()}, {}
    for i, (_, matrices) in enumerate(normuon.parts):
        work, grads = normuon.reduced.pop(i), normuon.shares[i]
        if work is not None:
            work.wait()
        mine = matrices[rank * len(grads):][: len(grads)]  # the padding's zeros are nobody's
        received.update({names[p]: g for p, g in zip(mine, grads)})
    for p, (grad, work) in adam.reduced.items():
        if work is not None:
            work.wait()
        mine = adam.slice(p)  # a view of p (flattened), from this offset
        assert len(grad) == len(mine)
        received[names[p]] = (mine.storage_offset(), grad)
    return received


def test_reductions_started_in_the_backward_pass_sum_each_ranks_share_as_one_process_does(gloo_runs):
    """Two ranks, each with one of a step's two micro-batches, their reductions started by start_reductions
    (NorMuon's groups in two parts each, Adam's large parameters one by one, its small ones in one all-reduce):
    every rank must receive, for its matrices and slices, the gradients one process accumulates over both
    micro-batches; between them the ranks must cover every large parameter, and each must hold every small one
    whole."""
    single = run_reductions(0, 1, 2)
    matrices, slices = set(), {name: [] for name, g in single.items() if isinstance(g, tuple)}
    for received in gloo_runs(run_reductions, 2):
        for name, grad in received.items():
            if isinstance(grad, tuple):
                (start, grad), expected = grad, single[name][1]
                expected = expected[start : start + len(grad)]
                slices[name].append((start, start + len(grad)))
            else:
                expected = single[name]
                matrices.add(name)
            assert expected.abs().max() > 0, name
            assert rel_error(grad, expected) < 1e-4, name  # float32 sums in another order (a scalar: 1.7e-5)
    assert matrices == set(single) - set(slices)
    sizes = [len(g[1]) for g in single.values() if isinstance(g, tuple)]
    assert min(sizes) < tg.ADAM_SHARD_MIN <= max(sizes)  # both kinds
    for name, bounds in slices.items():  # the ranks' slices tile a large parameter
        if len(single[name][1]) < tg.ADAM_SHARD_MIN:
            assert bounds == [(0, len(single[name][1]))] * 2, name
            continue
        ends = [0] + [end for _, end in sorted(bounds)]
        assert [start for start, _ in sorted(bounds)] == ends[:-1] and ends[-1] == len(single[name][1]), name


TRAIN_STEPS = ["--smoke", "--scheduled_steps", "6", "--extension_steps", "0", "--untie_frac", "0.5"]


def run_train_steps(rank, world_size, num_shares, ahead=False):
    """The six steps of TRAIN_STEPS (the untie after step 3, Adam on odd steps) through train_step, as rank
    `rank` of world_size: each rank trains on its micro-batches of every step; one process takes them all.
    ahead: each step is given the next step's n-gram rows to fetch (upcoming), and the next step's forward pass
    must find them in the table's cache. With several ranks the rows each rank asks of the others are exchanged
    as the batches are built, as in training (train_source)."""
    args = tg.parse_args(TRAIN_STEPS)
    model = tg.build_model(args, torch.device("cpu"), world_size)
    optimizers = tg.make_optimizers(model, args, world_size)
    group = dist.new_group(backend="gloo") if world_size > 1 else None
    source = tg.TrainSource(args.train_files, rank, world_size, repeat=True, ngram_rows=args.ngram_rows,
                            requests_group=group)
    shapes = [tg.train_shape(args, world_size, tg.TRAINING_STAGES[tg.stage_index(s, args)]) for s in range(6)]
    batches = list(tg.synchronous_batches(source, shapes))
    losses, exchanges, all_to_all = [], [], dist.all_to_all_single
    dist.all_to_all_single = lambda *args, **kwargs: exchanges.append(None) or all_to_all(*args, **kwargs)
    try:
        for step, batch in enumerate(batches):
            upcoming = None
            if ahead:
                assert (model.ngram.fetched is batch[0].ngram_rows) == (step > 0)
                assert bool(batch[0].ngram_asked) == (world_size > 1)
                if step + 1 < len(batches):
                    following = batches[step + 1][0]
                    upcoming = following.ngram_rows, following.ngram_owners, following.ngram_asked, None
            losses.append(tg.train_step(model, batch, optimizers, step, args, world_size, upcoming).item())
    finally:
        dist.all_to_all_single = all_to_all
    # a step's exchanges of n-gram rows with several ranks: the values and the gradients, and not the rows each
    # rank asks of the others, which come with the batches
    assert len(exchanges) == (0 if world_size == 1 else 2 * len(batches))
    # the n-gram table's cache holds each rank's own rows, and each rank its shard of the table (rows rank::2)
    weights = {name: p.detach() for name, p in model.named_parameters() if name != "ngram.cache"}
    return losses, weights, model.ngram.table


def test_two_ranks_train_as_one_process_does_within_rounding(gloo_runs):
    """Six steps of train_step on two ranks, across the untie: the ranks must hold the same weights, bit for bit,
    and log the losses one process logs. After the first two steps the losses may part by rounding: the
    optimizers turn the float32 sums' rounding in weak directions into whole updates (Adam's first step is
    sign(g) * lr), which moved these losses by up to 3e-4 relative at the sixth step; a micro-batch lost or
    counted twice moves the first step's by far more than 1e-5. The n-gram table's two shards make up the
    table one process trains, to rounding (rows given to the wrong rank: a relative error of about 1.4)."""
    losses, _, table = run_train_steps(0, 1, 2)
    (losses_0, params_0, shard_0), (losses_1, params_1, shard_1) = gloo_runs(run_train_steps, 2)
    assert losses_0 == losses_1 and all(torch.equal(params_0[name], params_1[name]) for name in params_0)
    assert losses_0[:2] == pytest.approx(losses[:2], rel=1e-5)
    assert losses_0 == pytest.approx(losses, rel=1e-3)
    assert len(shard_0) + len(shard_1) == len(table) and table.abs().sum() > 0
    assembled = torch.stack([shard_0, shard_1], dim=1).view_as(table)  # rows 0, 1, 2, ... alternate between ranks
    assert torch.equal(assembled != 0, table != 0)  # the same rows trained
    assert rel_error(assembled, table) < 0.05  # 0.019: rounding, which RowAdam's steps of 0.56 make whole updates


def run_train_steps_ahead(rank, world_size, num_shares):
    return run_train_steps(rank, world_size, num_shares, ahead=True)


def test_fetching_the_next_steps_rows_ahead_trains_exactly_as_fetching_them_in_its_forward_pass(gloo_runs):
    """train_step given the next step's n-gram rows (upcoming) fetches them after RowAdam's update of the table:
    one process and each of two ranks train the same losses, weights and table, bit for bit, as when each
    forward pass fetches its own rows (rows fetched before the update would be a step stale)."""
    for fetched_in_forward, ahead in [(run_train_steps(0, 1, 2), run_train_steps_ahead(0, 1, 2)),
                                      *zip(gloo_runs(run_train_steps, 2), gloo_runs(run_train_steps_ahead, 2))]:
        (losses, weights, table), (losses_ahead, weights_ahead, table_ahead) = fetched_in_forward, ahead
        assert losses_ahead == losses and torch.equal(table_ahead, table) and table.abs().sum() > 0
        assert all(torch.equal(weights_ahead[name], weights[name]) for name in weights)


def run_row_requests(rank, world_size, num_shares, steps=4):
    """Each of a PrefetchLoader's first `steps` batches (the stages' shapes in turn, so that it rebuilds at each
    new one) on rank `rank`: its n-gram rows, how many of them each rank holds, how many each asks of this one and
    which, exchanged in the loader's worker (train_source's gloo group)."""
    args = tg.parse_args(TRAIN_STEPS)
    loader = tg.PrefetchLoader(tg.train_source(args, rank, world_size, pin_memory=False), torch.device("cpu"))
    shapes = [tg.train_shape(args, world_size, stage) for stage in tg.TRAINING_STAGES]
    return [(micro.ngram_rows, micro.ngram_owners, dataclasses.astuple(micro.ngram_asked)) for step in range(steps)
            for micro in loader.send(shapes[step % len(shapes)])[:1]]


def test_each_rank_is_asked_for_the_rows_the_others_ask_of_it(gloo_runs):
    """The row requests exchanged as two ranks' loaders build their batches, batch by batch, across rebuilds: what
    rank r asks of rank s (its owners[s] rows, held by s) is what rank s is told it is asked for (its asked[r]),
    and the rows s is told of are those rows, as their places in its shard (row // 2), in the order r asks; with
    them the distinct rows, ascending, and each request's place among them (RowRequests)."""
    ranks = gloo_runs(run_row_requests, 2)
    assert len(ranks[0]) == len(ranks[1]) == 4
    for batch in zip(*ranks):
        (_, owners_0, (asked_0, *_)), (_, owners_1, (asked_1, *_)) = batch
        assert len(owners_0) == len(asked_0) == 2 and min(owners_0 + owners_1) > 0
        assert asked_0 == (owners_0[0], owners_1[0]) and asked_1 == (owners_0[1], owners_1[1])
        for s, (_, _, fields) in enumerate(batch):
            asked = tg.RowRequests(*fields)  # sent back as a tuple: torch.load takes tensors and plain types only
            wanted = torch.cat([rows[sum(owners[:s]): sum(owners[: s + 1])] for rows, owners, _ in batch])
            assert torch.equal(asked.rows, wanted // 2) and torch.all(wanted % 2 == s)
            assert torch.equal(asked.distinct, asked.rows.unique()) and len(asked.distinct) < len(asked.rows)
            assert torch.equal(asked.distinct[asked.segments.long()], asked.rows)


def sharded_table_steps(world_size, rows=50, dim=6, steps=5):
    """Each step, each of world_size ranks reads its own random rows of the table (rank 1 none at step 2), with
    random gradients: the rows, their gradients and the table one process would see (the ranks' rows together,
    their gradients summed in rank order)."""
    generator = torch.Generator().manual_seed(world_size)
    table = torch.randn(rows, dim, generator=generator)
    plan = []
    for step in range(steps):
        per_rank = []
        for rank in range(world_size):
            count = 0 if (rank, step) == (1, 2) else int(torch.randint(1, 20, (), generator=generator))
            read = torch.randperm(rows, generator=generator)[:count].int()  # in no order: the loader's are sorted
            per_rank.append((read, torch.randn(count, dim, generator=generator)))
        plan.append(per_rank)
    return table, plan


def run_sharded_table(rank, world_size, ranks):
    """sharded_table_steps(ranks) through NgramTable.fetch and RowAdam on rank `rank` (world_size 1: one process
    on every rank's rows at once): what each fetch put in the cache, and the table (this rank's shard) after."""
    table, plan = sharded_table_steps(ranks)
    ngram = tg.NgramTable(len(table), table.size(1), capacity=64, world_size=world_size)
    with torch.no_grad():
        ngram.table.copy_(table[rank::world_size])
    opt = tg.RowAdam(ngram, tg.ParamConfig("rows", lr_mul=70.0, wd_mul=5.0, betas=(0.0, 0.95)), lr=0.002, wd=0.5,
                     steps=len(plan))
    fetched = []
    for step, per_rank in enumerate(plan):
        if world_size == 1:  # the ranks' rows as one step's distinct rows, their gradients summed in rank order
            rows = torch.cat([read for read, _ in per_rank]).unique()
            grad = torch.zeros(len(rows), table.size(1))
            for read, g in per_rank:
                grad.index_add_(0, torch.searchsorted(rows, read), g)
        else:  # grouped by the rank that holds them, as the loader hands them out
            read, g = per_rank[rank]
            by_owner = torch.argsort(read % world_size, stable=True)
            rows, grad = read[by_owner], g[by_owner]
        owners = tuple(torch.bincount(rows % world_size, minlength=world_size).tolist())
        # the rows the ranks ask of this one, as a training batch's builder exchanges them
        asked = tg.exchange_row_requests(rows.int().numpy(), owners, None) if world_size > 1 else None
        ngram.fetch(rows.int(), owners, asked)
        fetched.append(ngram.cache[: len(rows)].detach().clone())
        ngram.cache.grad = torch.zeros_like(ngram.cache)
        ngram.cache.grad[: len(rows)] = grad
        opt.step(rows.int(), step)
    return fetched, ngram.table


@pytest.mark.parametrize("world_size", [2, 4])
def test_sharded_ngram_table_fetches_and_updates_as_one_table_does(world_size, gloo_runs):
    """2 or 4 ranks, each holding rows rank::world_size of a 50-row table (4 does not divide it), each reading
    its own rows (overlapping, grouped by owner but in no order within a group, one rank none at one step):
    every fetch brings the rows' current values, and after 5 steps of RowAdam the shards make up the table one
    process trains on the ranks' rows with their gradients summed."""
    table, plan = sharded_table_steps(world_size)
    single_fetched, single = run_sharded_table(0, 1, world_size)
    results = gloo_runs(run_sharded_table, world_size)
    assert sum(len(shard) for _, shard in results) == len(table)
    assembled = torch.empty_like(table)
    for rank, (_, shard) in enumerate(results):
        assembled[rank::world_size] = shard
    assert torch.allclose(assembled, single, rtol=1e-6, atol=1e-7) and not torch.allclose(assembled, table)
    for step, per_rank in enumerate(plan):  # each fetch: the rows' values as the steps before left them
        union = torch.cat([read for read, _ in per_rank]).unique()
        for rank, (read, _) in enumerate(per_rank):
            read = read[torch.argsort(read % world_size, stable=True)]  # the order the rank asked in
            expected = single_fetched[step][torch.searchsorted(union, read)]
            assert torch.allclose(results[rank][0][step], expected, rtol=1e-6, atol=1e-7), (step, rank)
            if step == 0:
                assert torch.equal(results[rank][0][0], table[read.long()])


# The runs of the tests above that share a gloo group (gloo_runs), by world size: one after another in each process.
GLOO_RUNS = {2: (run_muon, run_adam, run_reductions, run_train_steps, run_train_steps_ahead, run_row_requests,
                 run_sharded_table),
             4: (run_muon, run_adam, run_sharded_table)}


def test_reductions_start_in_the_order_the_backward_pass_finishes_gradients():
    """After one backward pass start_reductions starts the head's reduction before every hidden matrix's, the
    part holding the last layer's matrices before the one holding layer 0's, and the embeddings' (used first in
    the forward pass) after every matrix's; each reduction once."""
    args = tg.parse_args(["--smoke"])
    model = tg.GPT(args, fp8=False)
    named = [(n, p) for n, p in model.named_parameters() if tg.param_config(n).optimizer == "normuon"]
    normuon = tg.NorMuon(named, lr=0.01, wd=0.0, world_size=2)  # two ranks: each group in two parts
    adam = tg.Adam([(n, p) for n, p in model.named_parameters() if tg.param_config(n).optimizer == "adam"],
                   lr=0.01, wd=0.0)
    adam.untie(model.head.weight)  # the embedding joins Adam's groups
    events = tg.GradientEvents(normuon.reduction_groups() + adam.reduction_groups())
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
    (micro,) = next(tg.synchronous_batches(source, [tg.BatchShape(768, 512, 1)]))
    tg.forward_backward(model, micro, tg.StepState((128, 256), (256,), tied=False))
    started = []

    class Logged:
        def __init__(self, optimizer):
            self.optimizer = optimizer

        def reductions(self):
            return [(params, functools.partial(started.append, params))
                    for params, _ in self.optimizer.reductions()]

    tg.start_reductions([Logged(normuon), Logged(adam)], events)
    names = {p: n for n, p in model.named_parameters()}
    order = [{names[p] for p in params} for params in started]
    assert len(order) == len(normuon.parts) + sum(p.grad is not None for g in adam.param_groups for p in g["params"])
    assert len(normuon.parts) == 2 * len(normuon.param_groups)
    assert sorted(n for names_ in order for n in names_) == sorted(set(names.values()) - {"ngram.cache"})  # RowAdam's

    def index(name):
        return next(i for i, names_ in enumerate(order) if name in names_)

    last = len(args.layers) - 1
    matrices = [index(n) for n, _ in named]
    assert index("head.weight") < min(matrices)
    assert index(f"blocks.{last}.mlp.fc.weight") < index("blocks.0.mlp.fc.weight")
    qkv = [n for n, _ in named if n.endswith("attn.qkv")]  # some layers have no attention
    assert index(qkv[-1]) < index(qkv[0])
    assert index("embed.weight") > max(matrices) and index("value_embeds.0.weight") > max(matrices)


def test_normuon_updates_its_parts_in_the_order_their_reductions_started():
    """start_step takes the parts as their reductions were started (the backward pass's order), not in the order
    of its groups: a part whose gradients are summed late must not hold up the ones summed before it."""
    matrices = [torch.nn.Parameter(torch.randn(*shape)) for shape in ((8, 4), (4, 8), (6, 6))]
    for p in matrices:
        p.grad = torch.randn_like(p)
    normuon = tg.NorMuon([(f"blocks.{i}.mlp.fc.weight", p) for i, p in enumerate(matrices)], lr=0.01, wd=0.0)
    assert len(normuon.parts) == 3  # one group a shape, one part a group on one rank
    for i in (2, 0, 1):
        normuon.reduce(i)
    normuon.start_step()
    assert [i for i, _, _ in normuon.updates] == [2, 0, 1]
    before = [p.detach().clone() for p in matrices]
    normuon.finish_step()
    assert normuon.updates == [] and all(not torch.equal(p, b) for p, b in zip(matrices, before))


def test_a_step_s_first_pass_writes_the_matrices_gradients_and_later_passes_add():
    """train_step leaves NorMuon's matrices without gradients before a step's first micro-batch, which writes
    them (added to zeros, they cost a float32 add and a zeroing each, every step), and the later micro-batches
    add into them: after a step of two micro-batches each matrix holds the sum of that step's two gradients,
    with nothing of the step before, against the same passes from fresh gradients on a copy of the model."""
    args = tg.parse_args(["--smoke"])
    model = tg.build_model(args, torch.device("cpu"), 1)
    randomise_zero_initialised(model)
    optimizers = tg.make_optimizers(model, args, 1)
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
    batches = tg.synchronous_batches(source, [tg.BatchShape(768, 512, 2)] * 2)
    tg.train_step(model, next(batches), optimizers, 0, args, 1)
    batch = next(batches)
    fresh = copy.deepcopy(model)
    fresh.zero_grad(set_to_none=True)
    state = tg.step_state(1, args)
    fresh.prepare(state)
    for micro in batch:
        tg.forward_backward(fresh, micro, state)
    tg.train_step(model, batch, optimizers, 1, args, 1)
    matrices = [n for n, _ in model.named_parameters() if tg.param_config(n).optimizer == "normuon"]
    grads = {n: p.grad for n, p in model.named_parameters()}
    wants = {n: p.grad for n, p in fresh.named_parameters()}
    for name in matrices:
        assert wants[name].abs().max() > 0 and torch.allclose(grads[name], wants[name], rtol=1e-5, atol=1e-7), name


def test_optimizers_zero_their_gradients_in_one_foreach_call(monkeypatch):
    """NorMuon's and Adam's zero_grad (in place, as train_step calls it) zero every gradient through one
    torch._foreach_zero_ per dtype, not a zero_ per parameter: one launch per parameter left the GPU idle
    between back-to-back fills."""
    args = tg.parse_args(["--smoke"])
    model = tg.build_model(args, torch.device("cpu"), 1)
    adam, normuon, _ = tg.make_optimizers(model, args, 1)
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
    (micro,) = next(tg.synchronous_batches(source, [tg.BatchShape(768, 512, 1)]))
    tg.forward_backward(model, micro, tg.StepState((128, 256), (256,), tied=True))
    zeroed, foreach_zero = [], torch._foreach_zero_
    monkeypatch.setattr(torch, "_foreach_zero_", lambda tensors: (zeroed.append(len(tensors)), foreach_zero(tensors)))
    for opt in (normuon, adam):
        zeroed.clear()
        with_grads = [p for group in opt.param_groups for p in group["params"] if p.grad is not None]
        assert any(p.grad.abs().max() > 0 for p in with_grads)
        opt.zero_grad(set_to_none=False)
        assert all(p.grad is not None and not p.grad.any() for p in with_grads)
        assert sum(zeroed) == len(with_grads) and len(zeroed) <= 2  # float32 and bf16 at most


class LoggedEvents(tg.GradientEvents):
    """GradientEvents that logs each record: (the group, the parameters whose gradients were final by then)."""

    def __init__(self, groups):
        super().__init__(groups)
        self.final_so_far, self.log = set(), []

    def final(self, p):
        self.final_so_far.add(p)
        super().final(p)

    def record(self, g):
        self.log.append((g, set(self.final_so_far)))


def test_gradient_events_record_each_group_once_a_pass_after_all_its_gradients():
    """A group's event is recorded once in every backward pass, after the gradient of each of its parameters that
    gets one in the pass: the last block's as soon as its own are final, before the pass ends; the embedding's
    (unused while tied) at the pass's end; groups that mix early and late layers after their earliest layer's."""
    args = tg.parse_args(["--smoke"])
    model = tg.GPT(args, fp8=False)
    last = list(model.blocks[-1].parameters())
    rest = [p for n, p in model.named_parameters() if n not in ("embed.weight", "ngram.cache")
            and all(p is not q for q in last)]
    groups = [last, rest[0::2], rest[1::2], [model.embed.weight]]
    model.grad_events = events = LoggedEvents(groups)
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
    for micro in next(tg.synchronous_batches(source, [tg.BatchShape(768, 512, 2)])):  # two passes
        events.final_so_far, events.log = set(), []
        tg.forward_backward(model, micro, tg.StepState((128, 256), (256,), tied=True))
        assert sorted(g for g, _ in events.log) == list(range(len(groups)))
        for g, final in events.log:
            assert all(p in final for p in groups[g] if p in events.final_so_far), g
        recorded = dict(events.log)
        assert recorded[0] < events.final_so_far  # the last block's: before the pass ended
        assert model.embed.weight not in recorded[3] and recorded[3] == events.final_so_far


def test_row_lookup_adds_each_table_s_gradient_into_its_grad_as_autograd_would():
    """RowLookup's rows are F.embedding's in the dtype asked, and its backward adds each table's gradient into
    the .grad it has (or zeros, if it has none) as autograd adds F.embedding's, repeated tokens included; a table
    that a matmul also reads (the head's weight while tied) gets both gradients; each table's post-accumulate hook
    (GradientEvents') runs after its gradient is whole; a table whose rows the loss does not read keeps none."""
    torch.manual_seed(0)
    tables = [torch.nn.Parameter(torch.randn(50, 8, dtype=torch.float64)) for _ in range(4)]
    copies = [torch.nn.Parameter(t.detach().clone()) for t in tables]
    tables[0].grad = torch.randn_like(tables[0])  # the first already holds a gradient
    copies[0].grad = tables[0].grad.clone()
    ids = torch.randint(0, 50, (200,), dtype=torch.int32)
    assert torch.bincount(ids).max() > 1
    weights = [torch.randn(200, 8) for _ in range(3)]
    x = torch.randn(5, 8, dtype=torch.float64)
    hooked = gradients_as_hooks_see_them(tables)
    rows = tg.RowLookup.apply(ids, torch.from_numpy(sorting_order(ids.numpy())), torch.float32, *tables)
    assert all(r.dtype == torch.float32 and torch.equal(r, F.embedding(ids, t).float()) for r, t in zip(rows, tables))
    loss = sum((r * w).sum() for r, w in zip(rows, weights)) + (x @ tables[2].T).square().sum()  # the fourth unread
    loss.backward()
    loss = (sum((F.embedding(ids, c).float() * w).sum() for c, w in zip(copies, weights))
            + (x @ copies[2].T).square().sum())
    loss.backward()
    for t, c in zip(tables[:3], copies):
        assert torch.allclose(t.grad, c.grad, rtol=1e-6, atol=1e-6)
    assert all(torch.equal(hooked[i], tables[i].grad) for i in range(3))
    assert tables[3].grad is None and hooked.get(3) is None


ADAM = dict(lr=0.01, betas=(0.8, 0.95), wd=3.0, eps=1e-10)


def reference_adam(p, grads):
    """Adam with bias correction and cautious decay lr^2 * wd where the update and p agree, in float64."""
    p, m, v = p.double().clone(), 0, 0
    (b1, b2), lr = ADAM["betas"], ADAM["lr"]
    for t, g in enumerate(grads, 1):
        g = g.double()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        u = lr * (1 - b2**t) ** 0.5 / (1 - b1**t) * m / (v.sqrt() + ADAM["eps"])
        p = p - u - lr * lr * ADAM["wd"] * p * (u * p > 0)
    return p


def test_adam_against_float64_formula_and_untie_hand_over():
    """Three steps of one parameter, then a second parameter takes over its state ("untie") and both take
    two more steps on their own gradients: the second must move as the first would have from there."""
    g = torch.Generator().manual_seed(3)
    p0 = torch.randn(40, 8, generator=g)
    grads = [torch.randn(40, 8, generator=g) for _ in range(5)]
    late_grads = [torch.randn(40, 8, generator=g) for _ in range(2)]
    tied, untied = p0.clone().requires_grad_(), torch.zeros(40, 8).requires_grad_()
    adam = tg.Adam([("head.weight", tied), ("embed.weight", untied)], lr=ADAM["lr"], wd=1.0)
    (group,) = adam.param_groups  # one config: one group
    group.update(betas=ADAM["betas"], wd=ADAM["wd"], lr_mul=1.0)
    for grad in grads[:3]:
        tied.grad = grad.clone()
        adam.step()
    assert untied.abs().max() == 0  # no gradient, no step
    assert adam.late is untied
    adam.untie(tied)
    for grad, late in zip(grads[3:], late_grads):
        tied.grad, untied.grad = grad.clone(), late.clone()
        adam.step()
    assert rel_error(tied.detach() - p0, reference_adam(p0, grads) - p0) < 2e-5  # float32 against float64
    assert rel_error(untied.detach() - p0, reference_adam(p0, grads[:3] + late_grads) - p0) < 2e-5


def test_adam_reset_is_a_fresh_adam_through_the_untie():
    """The warm-up keeps Adam, as its CUDA graphs hold its state where it is, and resets it: after steps and an
    untie, then the weights restored, a reset Adam must take the same steps, untie included, as a new one."""
    g = torch.Generator().manual_seed(3)
    p0 = torch.randn(40, 8, generator=g)
    grads = [torch.randn(40, 8, generator=g) for _ in range(5)]
    late_grads = [torch.randn(40, 8, generator=g) for _ in range(2)]

    def run(adam, tied, untied):
        for grad in grads[:3]:
            tied.grad = grad.clone()
            adam.step()
        adam.untie(tied)
        for grad, late in zip(grads[3:], late_grads):
            tied.grad, untied.grad = grad.clone(), late.clone()
            adam.step()

    def new(tied, untied):
        return tg.Adam([("head.weight", tied), ("embed.weight", untied)], lr=ADAM["lr"], wd=1.0)
    runs = []
    for reused in (True, False):
        tied, untied = p0.clone().requires_grad_(), torch.zeros(40, 8).requires_grad_()
        adam = new(tied, untied)
        if reused:
            run(adam, tied, untied)
            with torch.no_grad():
                tied.copy_(p0), untied.zero_()
            adam.reset()
            assert adam.late is untied and adam.param_groups[0]["params"] == [tied]
        run(adam, tied, untied)
        runs.append((tied.detach(), untied.detach()))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])
    assert not torch.equal(runs[0][0], p0)


def test_every_parameter_has_one_table_row_and_matrices_go_to_normuon():
    model = tg.GPT(SMOKE, fp8=False)
    adam, normuon, row_adam = optimizers = tg.make_optimizers(model, SMOKE, 1)
    in_adam = {p for g in adam.param_groups for p in g["params"]} | {adam.late}  # the embedding joins at untie
    in_normuon = {p for g in normuon.param_groups for p in g["params"]}
    assert adam.late is model.embed.weight and tg.param_config("embed.weight").late
    assert row_adam.param_groups[0]["params"] == [model.ngram.cache]  # the n-gram table's: RowAdam's alone
    assert not in_adam & in_normuon and len(in_adam | in_normuon) + 1 == len(list(model.parameters()))
    for name, p in model.named_parameters():
        assert (p in in_normuon) == (p.ndim >= 2 and name.startswith("blocks.") and "value_gate" not in name), name
    assert tg.param_config("blocks.3.mlp.proj.weight").lr_mul == 4.0
    assert tg.param_config("value_embeds.1.weight").betas == (0.75, 0.95)
    assert tg.param_config("blocks.9.attn.value_gate.weight") == tg.ParamConfig("adam")
    assert tg.param_config("blocks.2.residual_mix").wd_mul == 0.0


# ----------------------------------------------------------------------------------------------------
# The model


def packed_batch(cu_seqlens, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = cu_seqlens[-1]
    inputs, targets = (torch.randint(0, 50257, (T,), generator=g, dtype=torch.int32) for _ in range(2))
    cu = torch.tensor(cu_seqlens, dtype=torch.int32)
    return micro_batch(inputs, targets, tg.SequenceBoundaries(cu, int((cu[1:] - cu[:-1]).max())))


def test_initial_loss_is_near_the_summed_uniform_cross_entropy():
    torch.manual_seed(0)
    model = tg.GPT(SMOKE, fp8=False)
    loss = model(packed_batch([0, 100, 256]), tg.StepState((64, 128), (128,), tied=True))
    assert loss.ndim == 0
    assert abs(loss.item() / 256 - math.log(SMOKE.vocab_size)) < 1e-2  # the head starts small


def test_initial_weights_follow_the_public_record():
    """Zero at first: the MLP's output projection, the gates and the n-gram table; attention's output projection
    uniform like q, k, v (#64); value embeddings small (std 0.01), not nn.Embedding's N(0, 1)."""
    torch.manual_seed(0)
    model = tg.GPT(SMOKE, fp8=False)
    bound = 0.5 * 3**0.5 * SMOKE.model_dim**-0.5
    for block in model.blocks:
        assert block.mlp is None or not block.mlp.proj.weight.any()
        if block.attn is not None:
            out = block.attn.out.weight
            assert out.abs().max() <= bound and out.std() > 0.5 * bound  # uniform: std bound/sqrt(3)
            assert not block.attn.gate.weight.any()
    assert not model.ngram.table.any()
    for table in model.value_embeds:
        assert abs(table.weight.std().item() - 0.01) < 1e-3


def test_fan_out_hands_out_aliases_and_sums_their_gradients_at_once():
    """FanOut: n aliases of t, forward; backward, the sum of their gradients (float64), an output used twice
    counted twice."""
    t = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    a, b, c = tg.FanOut.apply(t, 3)
    assert all(torch.equal(out, t) for out in (a, b, c))
    weights = torch.randn(3, 5, 3, dtype=torch.float64)
    (weights[0] * a + weights[1] * b + weights[2] * c + weights[2] * c).sum().backward()
    assert torch.allclose(t.grad, weights[0] + weights[1] + 2 * weights[2])


def test_model_hands_x0_and_the_ngram_embedding_out_through_fan_out(monkeypatch):
    """The smoke model's backward sums x0's gradient over its 5 consumers (the n-gram mix and the 4 layers) and
    the n-gram embedding's over its 3 (layer 0's mix, then layers 1 and 2, the attention layers after the first),
    each in one sum_of."""
    torch.manual_seed(0)
    model = tg.GPT(SMOKE, fp8=False)
    for p in model.parameters():
        p.data.normal_(0, 0.02)  # not zero-initialised: every consumer gets a gradient
    summed = []
    plain = tg.sum_of
    monkeypatch.setattr(tg, "sum_of", lambda tensors: summed.append(len(tensors)) or plain(tensors))
    model(packed_batch([0, 100, 256]), tg.StepState((64, 128), (128,), tied=True)).backward()
    assert SMOKE.layers == "LlsM" and sorted(summed) == [3, 5]


def test_gradient_of_a_batch_is_the_sum_over_its_halves():
    """Documents end at the split: the halves hold the same documents, at other packed positions. The key
    offset, the smear and the n-gram hashes reach one token across a document start by design (as in the
    public record), which the split would show: the key offset is off, the smear and the n-gram table
    are zero and their own gradients not compared (the table's cache holds each half's rows, not the whole's)."""
    torch.manual_seed(0)
    model = tg.GPT(SMOKE, fp8=False)
    for block in model.blocks:
        if block.attn is not None:
            block.attn.key_offset = False
    with torch.no_grad():  # leave the zero-initialised start, where most gradients vanish
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
        model.smear_lambda.zero_()
        model.ngram.table.zero_()
    batch = packed_batch([0, 50, 128, 200, 256], seed=1)
    state = tg.StepState((64, 128), (128,), tied=True)  # the long layers see 128 keys, the others 64: shorter
    # than the longest document

    def gradients(parts):
        model.zero_grad()
        for lo, hi, cu in parts:
            bounds = torch.tensor(cu, dtype=torch.int32)
            part = micro_batch(batch.inputs[lo:hi], batch.targets[lo:hi], tg.SequenceBoundaries(bounds, 128))
            model(part, state).backward()
        return [None if p.grad is None else p.grad.clone() for p in model.parameters()]

    whole = gradients([(0, 256, batch.seqs.cu_seqlens.tolist())])
    halves = gradients([(0, 128, [0, 50, 128]), (128, 256, [0, 72, 128])])
    for (name, _), a, b in zip(model.named_parameters(), whole, halves):
        if name == "embed.weight":  # stood in for by the head's weight while the two are tied
            assert a is None and b is None
            continue
        if name.startswith(("smear", "ngram")):
            continue
        assert a.abs().max() > 0, name
        assert rel_error(b, a) < 1e-4, name


# ----------------------------------------------------------------------------------------------------
# Command line


SCRIPT_FOLDER = Path(tg.__file__).resolve().parent


def test_parse_args_defaults_and_overrides(tmp_path, monkeypatch):
    """Defaults are the dataclass's, its data paths taken from the script's folder wherever the run starts;
    paths given on the command line are kept as given (relative to where the run starts)."""
    monkeypatch.chdir(tmp_path)
    args = tg.parse_args(["--scheduled_steps", "300", "--train_files", "x_*.bin", "--matrix_lr", "0.1"])
    assert (args.scheduled_steps, args.train_files, args.matrix_lr) == (300, "x_*.bin", 0.1)
    assert args.val_files == str(SCRIPT_FOLDER / "data/fineweb10B/fineweb_val_*.bin") and not args.smoke
    defaults = tg.Hyperparameters()
    assert tg.parse_args([]) == dataclasses.replace(
        defaults, **{name: str(SCRIPT_FOLDER / getattr(defaults, name)) for name in tg.PATH_FIELDS})
    assert Path(tg.parse_args(["--smoke"]).prefix_table).is_file()


@pytest.mark.parametrize("argv, expected", [
    ([], False), (["--repeat_train_files"], True), (["--repeat_train_files", "--seed", "3"], True),
    (["--no-repeat_train_files"], False), (["--repeat_train_files", "--no-repeat_train_files"], False),
])
def test_parse_args_booleans(argv, expected):
    assert tg.parse_args(argv).repeat_train_files is expected


def test_smoke_applies_smoke_settings_and_explicit_flags_win():
    args = tg.parse_args(["--scheduled_steps", "7", "--smoke", "--no-repeat_train_files"])
    for name, value in tg.SMOKE_SETTINGS.items():
        if name not in ("scheduled_steps", "repeat_train_files"):
            path = name in tg.PATH_FIELDS and value  # '' is no path: no file
            assert getattr(args, name) == (str(SCRIPT_FOLDER / value) if path else value), name
    assert args.scheduled_steps == 7 and args.repeat_train_files is False and args.smoke
    assert tg.parse_args(["--no-smoke"]) == tg.parse_args([])


@pytest.mark.parametrize("argv, message", [
    (["--no_such_flag", "1"], "--no_such_flag: unknown flag"),
    (["scheduled_steps", "3"], "scheduled_steps: unknown flag"),
    (["--smoke", "--lr", "1"], "--lr: unknown flag"),
    (["--scheduled", "3"], "--scheduled: unknown flag"),  # no abbreviations: a typo must not pick a flag
    (["--seed"], "--seed: expected one argument"),
    (["--seed", "x"], "--seed: invalid int value: 'x'"),
    (["--repeat_train_files", "false"], "false: unknown flag"),
])
def test_parse_args_errors_name_the_flag(argv, message):
    with pytest.raises(tg.UserError) as excinfo:
        tg.parse_args(argv)
    assert str(excinfo.value).startswith(message) and "--help" in str(excinfo.value)


@pytest.mark.parametrize("argv, message", [
    (["--scheduled_steps", "-5"], "--scheduled_steps: -5 is below its least value, 1"),
    (["--scheduled_steps", "0"], "--scheduled_steps: 0 is below its least value, 1"),
    (["--extension_steps", "-1"], "--extension_steps: -1 is below its least value, 0"),
    (["--batch_tokens", "0"], "--batch_tokens: 0 is below its least value, 1"),
    (["--layers", "LsM"], "--layers: 'LsM' is not at least 4 of the letters L, l, S, s, M and -"),
    (["--layers", "LsMX"], "--layers: 'LsMX' is not at least 4 of the letters"),
    (["--layers", "LSSM"], "--layers: 'LSSM' is not at least 4 of the letters L, l, S, s, M and -, with at least one l "
                           "or s"),
    (["--vocab_size", "50000"], "--vocab_size: 50000 is below its least value, 50257"),
    (["--vocab_size", "50260"], "--vocab_size: 50260 is no multiple of 8, which the validation mask's rows"),
    (["--model_dim", "100"], "--model_dim: 100 must be a multiple of --head_dim 128"),
    (["--smoke", "--head_dim", "30", "--model_dim", "60"], "--model_dim: 60 must be a multiple of --head_dim 30, "
                                                             "which must be a multiple of 4"),
    (["--cooldown_frac", "1.5"], "--cooldown_frac: 1.5 is not a fraction between 0 and 1"),
    (["--untie_frac", "-0.1"], "--untie_frac: -0.1 is not a fraction between 0 and 1"),
])
def test_sizes_and_step_counts_no_run_could_use_are_refused_naming_the_flag(argv, message):
    with pytest.raises(tg.UserError, match="^" + re.escape(message)):
        tg.parse_args(argv)


def test_help_lists_every_flag_with_its_default_and_meaning(capsys):
    with pytest.raises(SystemExit) as excinfo:
        tg.parse_args(["--help"])
    assert excinfo.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for field in dataclasses.fields(tg.Hyperparameters):
        meaning = " ".join(field.metadata["help"].split())
        assert len(meaning) > 10, field.name
        assert f"{meaning} (default: {field.default!r})" in text, field.name
        assert (f"--{field.name}, --no-{field.name}" if field.type is bool else f"--{field.name} ") in text


# ----------------------------------------------------------------------------------------------------
# Schedules


RECORD = tg.Hyperparameters()
PROXY = tg.parse_args(["--scheduled_steps", "187", "--extension_steps", "2"])


@pytest.mark.parametrize("args, starts, untie", [(RECORD, [0, 423, 847, 1044, 1198, 1270], 847),
                                                 (PROXY, [0, 62, 125, 154, 176, 187], 125),
                                                 (SMOKE, [0, 8, 16, 20, 23, 24], 17)], ids=["record", "proxy", "smoke"])
def test_stages_and_their_boundaries(args, starts, untie):
    """The record's boundaries round(1270 k / 3), the last third cut where the sampled softmax grows and where it
    ends (0.822 and 0.943 of the steps), then the extension; the same fractions of a shorter run."""
    assert tg.stage_starts(args) == starts and tg.untie_step(args) == untie
    N = tg.total_steps(args)
    stages = [tg.stage_index(step, args) for step in range(N)]
    assert stages == sorted(stages) and [stages.index(i) for i in range(len(starts))] == starts
    windows = [tg.attention_windows(step, args) for step in range(N + 1)]
    assert windows[0] == (128, 384) and windows[starts[1]] == (384, 896) and windows[starts[2]] == (640, 1408)
    assert windows[N - 1] == (768, 1664) and windows[N] == (768, 2560)  # the final validation's
    assert tg.yarn_windows(0, args) == (384,) and tg.yarn_windows(starts[1] - 1, args) == (384,)
    assert tg.yarn_windows(N - 1, args) == tg.yarn_windows(N, args) == (384, 896, 1408, 1664)


# The proxy schedule (195 + 3 steps) written out by hand, row by row: (first step, end, windows in tokens, sampled
# rows (None: the whole vocabulary), the MTP weights and the prefix weights as functions of the fraction t of the
# row done). The wiring test below holds the code's per-step state to it, so that a change landing a step early
# or late, weights in the wrong order or a wrong stage size fails; the functions of the schedule are not used to
# build it.
PROXY_195 = tg.parse_args(["--scheduled_steps", "195", "--extension_steps", "3"])
PROXY_195_ROWS = [
    (0, 65, (128, 384), 10240, lambda t: (1, 0.5, 0.25 * (1 - t)), lambda t: (0.25,)),
    (65, 130, (384, 896), 10240, lambda t: (1, 0.5 * (1 - t)), lambda t: (0.25 * (1 - t),)),
    (130, 160, (640, 1408), 14336, lambda t: (1,), lambda t: ()),
    (160, 184, (640, 1408), 24576, lambda t: (1,), lambda t: ()),
    (184, 195, (640, 1408), None, lambda t: (1,), lambda t: ()),
    (195, 198, (768, 1664), None, lambda t: (1,), lambda t: ()),  # the extension holds its row's start
]


def test_every_step_of_the_proxy_schedule_sets_the_state_written_out_by_hand():
    """step_state, GPT.prepare and the loader's shapes for steps 0-197, stage ends (start - 1) included: the head's
    loss terms and their weights in order, the windows, rotary's stretch, the tie (a validation's one step later),
    and the sampled softmax's size."""
    args = PROXY_195
    model = tg.GPT(tg.parse_args(["--smoke", "--scheduled_steps", "195", "--extension_steps", "3"]), fp8=False)
    assert tg.total_steps(args) == 198 and tg.untie_step(args) == 131
    for first, end, windows, rows, mtp, prefix in PROXY_195_ROWS:
        for step in range(first, end):
            t = 0.0 if first == 195 else (step - first) / (end - first)
            state = tg.step_state(step, args)
            model.prepare(state)
            assert state.windows == windows and tg.validation_state(step, args).windows == windows, step
            shape = tg.train_shape(args, 1, tg.TRAINING_STAGES[tg.stage_index(step, args)])
            assert (shape.candidates or None) == rows, step
            weights = mtp(t) + prefix(t)
            assert state.mtp == pytest.approx(mtp(t)) and state.prefix == pytest.approx(prefix(t)), step
            assert model.head.loss_weights[: len(weights)].tolist() == pytest.approx(weights), step
            assert state.tied == (step <= 131) and tg.validation_state(step, args).tied == (step <= 132), step
    assert model.rotary.long_windows == (384, 896, 1408, 1664)
    assert tg.attention_windows(198, args) == (768, 2560)  # the final validation's


def test_the_compiled_head_compiles_once_while_the_loss_weights_move():
    """Stage 1's loss weights move at every step (the prefix term's 0.25 -> 0, the second term's 0.5 -> 0) and
    reach the compiled head (compile_regions) through its buffer, so the head compiles for the stage's first step
    and never again in it. A head that read the weights themselves (a StepState's) was guarded on their values
    and recompiled at every step, inside a CUDA graph's capture too."""
    torch._dynamo.reset()
    args = tg.parse_args(["--smoke"])
    model = tg.GPT(args, fp8=False)
    counter = CompileCounter()
    model.head.compile(backend=counter, dynamic=False)
    steps = range(tg.stage_starts(args)[1], tg.stage_starts(args)[1] + 4)
    assert len({tg.step_state(step, args).prefix for step in steps}) == len(steps)  # a new weight every step
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
    shape = tg.train_shape(args, 1, tg.TRAINING_STAGES[1])
    frames = []
    try:
        for step, batch in zip(steps, tg.synchronous_batches(source, [shape] * len(steps))):
            state = tg.step_state(step, args)
            model.prepare(state)
            for micro in batch:
                model(micro, state).backward()
            frames.append(counter.frame_count)
    finally:
        torch._dynamo.reset()
    assert frames[0] > 0 and frames == [frames[0]] * len(steps)


def test_the_default_layout_layer_by_layer():
    """The 11-layer model as the record has it (#92's), written out: attention in layers 0, 1, 2, 3, 5, 8 and 10,
    an MLP in every layer but 7, which is gone but for its residual mix; 128-wide Q/K heads, the long window and
    the key offset in layers 0, 3 and 10, value embeddings into 1, 2, 8 and 10, the skip from 3 into 6, the
    head's dense connections from the streams after 3, 7 and 9."""
    assert tg.Hyperparameters().layers == "LssLMSM-sMl"
    with torch.device("meta"):  # shapes and structure only: no memory, no initialisation
        model = tg.GPT(tg.Hyperparameters(), fp8=False)
    attention = [i for i, block in enumerate(model.blocks) if block.attn is not None]
    assert len(model.blocks) == 11 and attention == [0, 1, 2, 3, 5, 8, 10]
    assert [i for i, block in enumerate(model.blocks) if block.mlp is None] == [7]
    assert [name for name, _ in model.blocks[7].named_parameters()] == ["residual_mix"]
    assert all(model.blocks[i].attn.head_dim == 128 and model.blocks[i].attn.num_heads == 6 for i in attention)
    assert model.layer_windows(("short", "long")) == ["long", "short", "short", "long"] + ["short"] * 6 + ["long"]
    assert [i for i in attention if model.blocks[i].attn.key_offset] == [0, 3, 10]
    gated = [i for i in attention if model.blocks[i].attn.value_gate is not None]
    assert gated == model.value_layers == [1, 2, 8, 10]
    assert (model.skip_from, model.skip_to, model.dense_layers) == (3, 6, (3, 7, 9))


def test_learning_rate_and_momentum_schedules_of_the_record():
    lr = [tg.lr_factor(step, RECORD) for step in range(1285)]
    assert lr[0] == lr[253] == 1.0 and lr[254] < 1.0  # the cool-down starts at int(0.2 * 1270) = 253 (254 - 1e-13)
    # 423: 1.52 (1 - 170/1017) + 0.3 170/1017; 846 and 847: 593/1017 and 594/1017 of the way at 1.52 and 1.73
    assert lr[423] == pytest.approx(1.3161, abs=1e-4)
    assert lr[846] == pytest.approx(0.8086, abs=1e-4) and lr[847] == pytest.approx(0.8948, abs=1e-4)
    assert lr[1270] == lr[1284] == pytest.approx(0.3)
    momentum = [tg.matrix_momentum(step, RECORD) for step in range(1285)]
    assert momentum[0] == 0.85 and momentum[150] == pytest.approx(0.90) and momentum[300] == momentum[1235] == 0.95
    assert momentum[1284] == pytest.approx(0.852) and all(a >= b for a, b in zip(momentum[1235:], momentum[1236:]))


def test_train_shape_gives_each_stage_the_record_per_rank_shapes_and_refuses_sizes_that_do_not_divide():
    for world_size in (1, 2, 4, 8):
        shapes = [tg.train_shape(RECORD, world_size, stage) for stage in tg.TRAINING_STAGES]
        assert [(s.tokens, s.max_seq_len) for s in shapes] == [(16384, 896), (32768, 2048)] + [(49152, 2048)] * 4
        assert [s.candidates for s in shapes] == [10240, 10240, 14336, 24576, 0, 0]  # 0: the whole vocabulary
        assert all(s.accum_steps == 8 // world_size for s in shapes)
    small_vocabulary = dataclasses.replace(RECORD, vocab_size=12288)  # rows at least the vocabulary: all of it
    assert [tg.train_shape(small_vocabulary, 1, stage).candidates for stage in tg.TRAINING_STAGES[:4]] == [
        10240, 10240, 0, 0]
    with pytest.raises(tg.UserError, match="--batch_tokens: 393216 and --micro_batch_tokens 49152"):
        tg.train_shape(RECORD, 3, tg.TRAINING_STAGES[0])
    with pytest.raises(tg.UserError, match="--batch_tokens: 1000"):
        tg.train_shape(tg.parse_args(["--batch_tokens", "1000"]), 1, tg.TRAINING_STAGES[0])


def test_train_steps_across_the_untie_hand_the_head_over_to_the_embedding():
    """Tied: the embedding is never updated and the head gets both gradients. At the step after the untie
    step the embedding starts as the head's copy, with its Adam moments; then the two part."""
    torch.manual_seed(0)
    args = tg.parse_args(["--smoke", "--scheduled_steps", "6", "--extension_steps", "0", "--untie_frac", "0.5"])
    assert tg.untie_step(args) == 3
    model = tg.GPT(args, fp8=False)
    adam, normuon, row_adam = optimizers = tg.make_optimizers(model, args, 1)
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
    batches = tg.synchronous_batches(source, [tg.train_shape(args, 1, tg.TRAINING_STAGES[tg.stage_index(s, args)])
                                              for s in range(6)])
    embed0 = model.embed.weight.detach().clone()
    for step, batch in enumerate(batches):
        before = model.head.weight.detach().clone()
        tg.train_step(model, batch, optimizers, step, args, 1)
        if step <= 3:
            assert tg.step_state(step, args).tied and torch.equal(model.embed.weight, embed0)
        if step == 4:
            assert not tg.step_state(step, args).tied
            assert model.embed.weight.grad is not None  # for Adam's next (odd) step
            assert torch.equal(model.embed.weight, before)
            head_state, embed_state = adam.state[model.head.weight], adam.state[model.embed.weight]
            assert torch.equal(head_state["exp_avg"], embed_state["exp_avg"])
            assert head_state["exp_avg"] is not embed_state["exp_avg"]
    assert not torch.equal(model.embed.weight, model.head.weight)


def test_steps_run_out_of_order_as_the_benchmarks_do_untie_once():
    """step_ab.py and step_profile.py skip from a stage's first steps to the next's and repeat them: the first
    step past the untie step unties (even if it is not the one right after), and a repeat does not untie again."""
    args = tg.parse_args(["--smoke", "--scheduled_steps", "8", "--extension_steps", "0", "--untie_frac", "0.5"])
    assert tg.untie_step(args) == 5
    model = tg.GPT(args, fp8=False)
    adam, normuon, row_adam = optimizers = tg.make_optimizers(model, args, 1)
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
    steps = [0, 1, 7, 7, 6]
    shapes = [tg.train_shape(args, 1, tg.TRAINING_STAGES[tg.stage_index(s, args)]) for s in steps]
    for step, batch in zip(steps, tg.synchronous_batches(source, shapes)):
        tg.train_step(model, batch, optimizers, step, args, 1)
        assert (adam.late is None) == (step > 5)
    (group,) = (g for g in adam.param_groups if any(p is model.embed.weight for p in g["params"]))
    assert sum(p is model.embed.weight for p in group["params"]) == 1


# ----------------------------------------------------------------------------------------------------
# The CPU smoke run

STEP_LINE = re.compile(r"step:(\d+)/(\d+) (val|train)_loss:(\d+\.\d{4}) train_time:(\d+\.\d)ms step_avg:(\d+\.\d\d)ms")
FINAL_LINE = re.compile(r"final val_loss:(\d+\.\d{4}) train_time:(\d+\.\d)ms step_avg:(\d+\.\d\d)ms steps:(\d+)")


def check_log_format(lines, run_id, world_size):
    """docs/log_format.md, line by line; returns the hyperparameters and {(kind, step): (loss, train_time)}
    of the step lines."""
    assert lines[:2] == ["train_gpt.py run log", f"run_id: {run_id}"]
    sha = re.fullmatch(r"code_sha256: ([0-9a-f]{64})", lines[2]).group(1)
    assert lines[3].startswith("command: train_gpt.py --smoke")
    assert lines[4] == "==== source train_gpt.py ===="
    end = lines.index("==== end source ====")
    source = "\n".join(lines[5:end]) + "\n"
    assert hashlib.sha256(source.encode()).hexdigest() == sha and "def main(argv):" in source
    assert lines[end + 1].startswith("hyperparameters: {")
    args = json.loads(lines[end + 1].removeprefix("hyperparameters: "))
    table = Path(args["prefix_table"]).read_bytes()
    assert lines[end + 2] == f"prefix_table_sha256: {hashlib.sha256(table).hexdigest()}"
    assert lines[end + 3] == "merge_table_sha256: none" and args["merge_table"] == ""  # the smoke run has no mask
    assert lines[end + 4].startswith("environment: python=") and f"world_size={world_size} " in lines[end + 4]
    variables = json.loads(lines[end + 5].removeprefix("environment_variables: "))
    assert lines[end + 5].startswith("environment_variables: {") and "PATH" not in variables
    assert all(name.startswith(tg.LOGGED_VARIABLE_PREFIXES) for name in variables)
    assert lines[end + 6] == "==== nvidia-smi ===="
    rest = lines[lines.index("==== end nvidia-smi ====") + 1:]

    N, every = args["scheduled_steps"] + args["extension_steps"], args["val_loss_every"]
    steps = [STEP_LINE.fullmatch(line) for line in rest if line.startswith("step:")]
    assert all(steps)
    order = [(m[3], int(m[1])) for m in steps]
    expected = [("val", 0)]
    for k in range(1, N + 1):
        expected += [("train", k)] + ([("val", k)] if k == N or (every and k % every == 0) else [])
    assert order == expected and all(int(m[2]) == N for m in steps)

    times = [float(m[5]) for m in steps]
    assert times[0] == 0.0 and all(a <= b for a, b in zip(times, times[1:]))
    for m in steps:
        step, time, avg = int(m[1]), float(m[5]), float(m[6])
        assert abs(avg - time / max(step, 1)) <= 0.05 / max(step, 1) + 0.005 + 1e-9
    table = {(m[3], int(m[1])): (float(m[4]), float(m[5])) for m in steps}
    for k in range(1, N + 1):
        if ("val", k) in table:
            assert table["val", k][1] == table["train", k][1]

    final = FINAL_LINE.fullmatch(lines[-1])
    assert final and not any(line.startswith("error:") for line in rest)
    assert (float(final[1]), float(final[2])) == table["val", N] and int(final[4]) == N
    return args, table, variables


def run_in_copy(tmp_path, command, env=None):
    """Run `command` where ./train_gpt.py and ./data lead to the repository's, so that logs/ is tmp_path's, with
    `env` added to the environment; returns the lines of the one log it wrote, and its run id. A run that hangs
    (ranks waiting on a collective that another rank never joins) fails after 5 minutes instead of holding CI to
    its limit."""
    for name in ("train_gpt.py", "data"):
        (tmp_path / name).symlink_to(ROOT / name)
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, **(env or {})})
    ranks = [line for line in run.stderr.splitlines() if line.startswith("[rank")]  # torchrun's children
    assert run.returncode == 0, "\n".join(ranks[-40:]) or run.stderr[-3000:]
    (log,) = (tmp_path / "logs").glob("*.txt")
    return read_log(log), log.stem


# Slow: a real training run, about 1-2 minutes on 2 cores (python train_gpt.py --smoke on data/sample).
def test_cpu_smoke_run(tmp_path):
    # NCCL_MAX_CTAS does nothing on the CPU: it stands for a setting that would change a GPU run's speed
    lines, run_id = run_in_copy(tmp_path, [sys.executable, "train_gpt.py", "--smoke"], env={"NCCL_MAX_CTAS": "8"})
    args, table, variables = check_log_format(lines, run_id, world_size=1)
    assert variables["NCCL_MAX_CTAS"] == "8"
    N = args["scheduled_steps"] + args["extension_steps"]
    assert table["val", N][0] <= table["val", 0][0] - 1.0


RANK_1_WHOLE_VOCABULARY_AT_STEP_1 = """
import dataclasses, os, sys
import train_gpt as tg

train_step, rank = tg.Run.train_step, int(os.environ["RANK"])


def watched(run, step, trace=False):
    # rank 1's micro-batches of the warm-up's step 1 over the whole vocabulary: a variant of the compiled graphs
    # that is new on rank 1 alone (rank 0's step 1 has step 0's), so that rank 1 alone traces it
    loader = run.train_loader
    if trace and step == 1 and rank == 1:
        send = loader.send
        loader.send = lambda shape: [dataclasses.replace(micro, candidates=None) for micro in send(shape)]
    before = len(exchanges)
    try:
        return train_step(run, step, trace)
    finally:
        loader.__dict__.pop("send", None)
        with open(f"steps.rank{rank}", "a") as file:  # the variants traced so far, this step's row exchanges
            file.write(f"{len(run.traced)} {len(exchanges) - before}\\n")


exchanges, exchange = [], tg.RowExchange.__init__  # every fetch of n-gram rows from the other ranks


def counted(self, *args):
    exchanges.append(None)
    exchange(self, *args)


tg.Run.train_step, tg.RowExchange.__init__ = watched, counted
sys.argv[0] = "train_gpt.py"
sys.exit(tg.main(sys.argv[1:]))
"""


# About 20 seconds: two CPU processes (gloo) train the smoke model for six steps.
def test_two_process_run_with_fewer_validation_chunks_than_ranks_and_a_variant_one_rank_alone_traces(tmp_path):
    """val_tokens is a single chunk of val_seq_tokens, so rank 1 validates nothing; the warm-up's validation
    must not ask it for a batch either. And in the warm-up's step 1, rank 1 alone meets a new variant of the
    compiled graphs (its micro-batches over the whole vocabulary, rank 0's over sampled rows as at step 0), whose
    trace, a forward pass, fetches the step's n-gram rows on rank 1 only: every rank must still exchange rows as
    often as the others, step by step."""
    (tmp_path / "run.py").write_text(RANK_1_WHOLE_VOCABULARY_AT_STEP_1)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "run.py",
               "--smoke", "--warmup_steps", "2", "--val_tokens", "1024", "--val_seq_tokens", "1024",
               "--batch_tokens", "1536", "--micro_batch_tokens", "384", "--scheduled_steps", "6", "--extension_steps",
               "0"]
    lines, run_id = run_in_copy(tmp_path, command)
    args, table, _ = check_log_format(lines, run_id, world_size=2)
    assert args["val_tokens"] == 1024
    assert set(table) == {("val", 0), *(("train", step) for step in range(1, 7)), ("val", 6)}
    (traced_0, exchanges_0), (traced_1, exchanges_1) = (
        zip(*(map(int, line.split()) for line in (tmp_path / f"steps.rank{rank}").read_text().splitlines()))
        for rank in (0, 1))
    assert traced_0[1] == traced_0[0] and traced_1[1] == traced_1[0] + 1  # the warm-up's steps 0 and 1
    # the same row exchanges, step by step, on both ranks: when the trace's fetch did not count as its step's (a
    # mutation, session 29), rank 1 waited at its extra exchange until run_in_copy's timeout
    assert exchanges_0 == exchanges_1 and len(exchanges_0) > 6 and sum(exchanges_0) > 6


def test_compiled_regions_equal_eager_and_stay_under_the_recompile_limit():
    """Windows that grow, batches of different documents, value embeddings and the skip connection present or
    not, the layer without attention and validation's grad mode must not multiply a compiled region's
    variants past the limit that compile_regions sets: past it, dynamo runs them uncompiled, a silent
    slowdown. Every variant must compute what the uncompiled model computes. And every graph must be one that
    AOTAutograd's cache can keep (the head's loss and the MLP are autograd Functions): a graph it bypasses is
    traced again at every warm start. Inductor's CPU backend compiles here: about a minute."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    args = tg.parse_args(["--smoke", "--layers", "LssSLSSMSssl", "--model_dim", "64", "--head_dim", "32"])
    model = tg.GPT(args, fp8=False)
    randomise_zero_initialised(model)
    eager = copy.deepcopy(model)
    train = tg.synchronous_batches(tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows),
                                   [tg.BatchShape(1024, 512, 1)] * 4)
    (val,) = next(tg.synchronous_batches(tg.ValSource(args.val_files, 2048, 1024, 0, 1, args.ngram_rows),
                                         [tg.BatchShape(1024, 1024, 1)]))
    try:
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=8):
            tg.compile_regions(model)
            for step, (micro,) in enumerate(train):
                windows = (64 * (step + 1), 128 * (step + 1))
                state = tg.StepState(windows, (windows[1],), tied=True)
                losses = [m(micro, state) for m in (model, eager)]
                for loss in losses:
                    loss.backward()
                assert torch.allclose(*losses, rtol=1e-5)
                for (name, p), q in zip(model.named_parameters(), eager.parameters()):
                    if name == "embed.weight":  # the head's weight stands in for it while tied
                        assert p.grad is None and q.grad is None
                        continue
                    assert rel_error(p.grad, q.grad) < 1e-3, name  # float32 sums in another order
                with torch.no_grad():
                    losses = [m(val, state) for m in (model, eager)]
                assert torch.allclose(*losses, rtol=1e-5)
        aot = torch._dynamo.utils.counters["aot_autograd"]
        assert aot["autograd_cache_bypass"] == 0 and aot["autograd_cache_miss"] + aot["autograd_cache_hit"] > 0
    finally:
        torch._dynamo.reset()


DYNAMO_CACHE_PASSES = """
import json, sys
import torch
import train_gpt as tg
from torch._dynamo.utils import counters

cache = sys.argv[1]
tg.load_compile_cache(cache, 0, print)
args = tg.parse_args(["--smoke", "--layers", "sMMM", "--model_dim", "64", "--head_dim", "32"])
torch.manual_seed(0)
model = tg.GPT(args, fp8=False)
tg.compile_regions(model)
source = tg.TrainSource(args.train_files, 0, 1, repeat=True, ngram_rows=args.ngram_rows)
train = tg.synchronous_batches(source, [tg.BatchShape(1024, 512, 1)] * 2)
(val,) = next(tg.synchronous_batches(tg.ValSource(args.val_files, 2048, 1024, 0, 1, args.ngram_rows),
                                     [tg.BatchShape(1024, 1024, 1)]))
losses, retraced = [], []
for step, (micro,) in enumerate(train):
    state = tg.StepState((64 * (step + 1), 128 * (step + 1)), (128 * (step + 1),), tied=True)
    model.prepare(state)
    with tg.gradients_set_aside(model):
        model(micro, state)
    traced = counters["stats"]["unique_graphs"]
    losses.append(tg.forward_backward(model, micro, state).item())
    retraced.append(counters["stats"]["unique_graphs"] - traced)
with tg.gradients_set_aside(model), torch.no_grad():
    losses.append(model(val, state).item())
tg.save_compile_cache(cache, 0)  # as every run does at the end of its warm-up
print(json.dumps(dict(losses=losses, retraced=retraced, graphs=counters["stats"]["unique_graphs"],
                      hits=counters["dynamo_cache"]["dynamo_cache_hit"])))
"""


def dynamo_cache_passes(cache, processes):
    """DYNAMO_CACHE_PASSES's results in `processes` new processes, one after the other on `cache`, whose caches
    are the folders that load_compile_cache names (environment_without_cache_dirs), empty at first."""
    env = environment_without_cache_dirs()
    return [json.loads(subprocess.run([sys.executable, "-c", DYNAMO_CACHE_PASSES, str(cache)], cwd=ROOT, env=env,
                                      capture_output=True, text=True, check=True, timeout=300).stdout.splitlines()[-1])
            for _ in range(processes)]


def test_a_warm_process_loads_every_region_from_dynamos_cache_and_traces_none(tmp_path):
    """Dynamo's cache (compile_regions) as warm_up uses it, in two processes one after the other on one compile
    cache: the first traces every region with the gradients set aside, then runs its forward and backward
    passes, which must trace nothing again once gradients exist; the second must load the four compiled
    functions (Block's three parts and the head), trace no graph and compute the same losses. Frames traced
    while parameters had gradients saved, but their load raised a TypeError (torch 2.13); a custom op called by
    its Python name could not be saved."""
    cold, warm = dynamo_cache_passes(tmp_path / "cache", 2)
    assert cold["graphs"] > 0 and cold["retraced"] == [0, 0]
    assert warm["graphs"] == 0 and warm["hits"] == 4 and warm["losses"] == cold["losses"]


def test_a_function_that_dynamos_cache_cannot_load_ends_the_start_and_deletes_that_cache(tmp_path, monkeypatch):
    """PyTorch recovers from some saved frames that cannot be loaded, not from others (the TypeError above), and
    a second torch.compile after such a failure failed too: compiled must delete Dynamo's cache, so that the
    next start traces afresh, and end this one with an error that says so; without Dynamo's cache on, the
    error is PyTorch's own."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    (tmp_path / "dynamo" / "entry").mkdir(parents=True)

    def failing(function, **options):
        raise TypeError("assigned grad expected to be a Tensor or None but got grad of type _Missing")
    monkeypatch.setattr(torch, "compile", failing)

    def function(x):
        return x
    with torch._dynamo.config.patch(caching_precompile=False), pytest.raises(TypeError):
        tg.compiled(function, False, False)
    assert (tmp_path / "dynamo" / "entry").exists()
    with torch._dynamo.config.patch(caching_precompile=True), pytest.raises(tg.UserError, match="start again"):
        tg.compiled(function, False, False)
    assert not (tmp_path / "dynamo").exists()


def test_compiled_regions_compile_each_batch_shape_statically():
    """Three token counts, as in the three stages, must give three graphs. With dynamic shapes dynamo
    compiles a second, symbolic graph at the second count and reuses it for the third and for the first;
    on an H100 the first stage's steps then took 412 ms instead of 308."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    block = tg.Block(64, 32, tg.Rotary(32, max_len=384), fp8=False)
    block.compile()
    try:
        for tokens in (128, 256, 384, 128):
            x = torch.randn(tokens, 64)
            block.before_attention(x, x, None, None, None)
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 3
    finally:
        torch._dynamo.reset()


def reference_head_loss(x, w, targets, weights=(1.0,)):
    """sum_k weights[k] * the summed cross-entropy against targets[:, k] where it is not -1, in float64."""
    targets = targets.long().view(targets.size(0), -1)
    capped = 23 * torch.sigmoid((x.double() @ w.double().T + 5) / 7.5)
    return sum(weight * F.cross_entropy(capped, targets[:, k], ignore_index=-1, reduction="sum")
               for k, weight in enumerate(weights))


def mtp_targets(T, vocab, K, generator=None):
    """(T, K) targets as Head builds them: column k is column 0 moved up k rows, -1 past the end."""
    nxt = torch.randint(0, vocab, (T,), dtype=torch.int32, generator=generator)
    return torch.stack([F.pad(nxt[k:], (0, k), value=-1) for k in range(K)], dim=1)


MTP_WEIGHTS = (1.0, 0.5, 0.25)


def test_head_loss_and_its_gradients_equal_autograd_of_the_formula():
    """The gradient computed in the forward pass, scaled in the backward pass by the loss's own gradient: that
    of the multi-token objective (three targets, the last rows without some), while the loss returned is the
    next-token term alone."""
    torch.manual_seed(0)
    x, w = torch.randn(64, 32, dtype=torch.float64), torch.randn(500, 32, dtype=torch.float64)
    targets = mtp_targets(64, 500, 3)
    x1, w1, x2, w2 = (t.clone().requires_grad_() for t in (x, w, x, w))
    loss = tg.HeadLoss.apply(x1, w1, targets, torch.tensor(MTP_WEIGHTS), False)
    ref = reference_head_loss(x2, w2, targets, MTP_WEIGHTS)
    (2.5 * loss).backward()
    (2.5 * ref).backward()
    next_token = reference_head_loss(x, w, targets[:, 0]).item()
    assert abs(loss.item() - next_token) < 1e-5 * next_token  # the loss itself is summed in float32
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5) and torch.allclose(w1.grad, w2.grad, atol=1e-5)


@pytest.mark.parametrize("prefix_term", [False, True])
def test_head_builds_the_later_targets_and_the_prefix_targets_from_the_next_ones(prefix_term):
    """Head.forward with three terms, and the prefix term or not: the gradient of the objective on targets
    shifted within the micro-batch (none past its end) and on the next tokens' prefix tokens (none for some),
    with the weights in its buffer."""
    torch.manual_seed(0)
    prefix_tokens = torch.randint(0, 500, (500,), dtype=torch.int32)
    prefix_tokens[::3] = -1  # tokens without a prefix token
    head = tg.Head(32, 500, fp8=False, prefix_tokens=prefix_tokens, initial_shares=[], masked=False).double()
    weights = MTP_WEIGHTS + ((0.25,) if prefix_term else ())
    head.loss_weights[: len(weights)].copy_(torch.tensor(weights))
    x = torch.randn(64, 32, dtype=torch.float64, requires_grad=True)
    targets = mtp_targets(64, 500, 3)
    if prefix_term:
        targets = torch.cat([targets, prefix_tokens[targets[:, :1].long()]], dim=1)
        assert (targets[:, 3] == -1).any() and (targets[:, 3] >= 0).any()
    head(x, [], targets[:, 0], None, 3, prefix_term, None).backward()
    x2 = x.detach().clone().requires_grad_()
    w2 = head.weight.detach().clone().requires_grad_()
    reference_head_loss(tg.rms_norm(x2), w2, targets, weights).backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-5) and torch.allclose(head.weight.grad, w2.grad, atol=1e-5)


def sampled_head_and_input(seed=0, vocab=500):
    """A float64 Head with the weights of three terms and the prefix term in its buffer (some tokens without a
    prefix token), and an input."""
    torch.manual_seed(seed)
    prefix_tokens = torch.randint(0, vocab, (vocab,), dtype=torch.int32)
    prefix_tokens[::3] = -1
    head = tg.Head(32, vocab, fp8=False, prefix_tokens=prefix_tokens, initial_shares=[], masked=False).double()
    head.loss_weights[:4].copy_(torch.tensor(MTP_WEIGHTS + (0.25,)))
    return head, torch.randn(64, 32, dtype=torch.float64), torch.randint(0, vocab, (64,), dtype=torch.int32)


def test_sampled_head_over_the_whole_vocabulary_is_the_head():
    """Candidates that are every row: the same loss and gradients as no candidates."""
    head, x, targets = sampled_head_and_input()
    losses, grads = [], []
    for candidates in (None, torch.arange(500, dtype=torch.int32)):
        head.zero_grad()
        x1 = x.clone().requires_grad_()
        loss = head(x1, [], targets, candidates, 3, True, None)
        loss.backward()
        losses.append(loss.item())
        grads.append((x1.grad, head.weight.grad.clone()))
    assert losses[0] == pytest.approx(losses[1], rel=1e-12)
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-12) and torch.allclose(grads[0][1], grads[1][1], atol=1e-12)


def test_sampled_head_is_the_softmax_over_the_candidate_rows_alone():
    """The objective of the head whose vocabulary is the candidate rows: every target among them (as the loader
    makes them), prefix tokens not among them left out; rows outside get no gradient."""
    head, x, targets = sampled_head_and_input(seed=1)
    generator = torch.Generator().manual_seed(1)
    others = torch.randperm(500, generator=generator)[:150].int()
    candidates = torch.unique(torch.cat([targets, others])).int()
    prefix = head.prefix_tokens[targets.long()]
    assert (~torch.isin(prefix[prefix >= 0], candidates)).any()  # some prefix tokens are left out
    x1 = x.clone().requires_grad_()
    head(x1, [], targets, candidates, 3, True, None).backward()

    row = {int(token): i for i, token in enumerate(candidates)}
    remapped = torch.tensor([row[int(t)] for t in targets])
    columns = [F.pad(remapped[k:], (0, k), value=-1) for k in range(3)]
    columns.append(torch.tensor([row.get(int(p), -1) for p in prefix]))
    x2 = x.clone().requires_grad_()
    w2 = head.weight.detach()[candidates.long()].clone().requires_grad_()
    reference_head_loss(tg.rms_norm(x2), w2, torch.stack(columns, 1), MTP_WEIGHTS + (0.25,)).backward()
    outside = torch.ones(500, dtype=torch.bool)
    outside[candidates.long()] = False
    assert torch.allclose(x1.grad, x2.grad, atol=1e-6)  # the head's softmax is in float32
    assert torch.allclose(head.weight.grad[candidates.long()], w2.grad, atol=1e-6)
    assert not head.weight.grad[outside].any()


def test_loss_weights_follow_the_stage_table():
    args = tg.parse_args(["--scheduled_steps", "300", "--extension_steps", "3"])  # stages start at 0, 100, 200
    assert tg.loss_weights(0, args) == ((1, 0.5, 0.25), (0.25,))
    mtp, prefix = tg.loss_weights(50, args)
    assert mtp == pytest.approx((1, 0.5, 0.125)) and prefix == (0.25,)
    assert tg.loss_weights(100, args) == ((1, 0.5), (0.25,))
    mtp, prefix = tg.loss_weights(150, args)
    assert mtp == pytest.approx((1, 0.25)) and prefix == pytest.approx((0.125,))
    assert tg.loss_weights(200, args) == tg.loss_weights(299, args) == tg.loss_weights(302, args) == ((1,), ())


@pytest.mark.parametrize("fp8", [False, True])
def test_head_loss_compiles_as_one_graph(fp8):
    """A graph break inside the Function makes dynamo run all of it eagerly: about 20% slower steps."""
    torch._dynamo.reset()
    x = torch.randn(16, 64, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(256, 64, requires_grad=True)
    targets, weights = mtp_targets(16, 256, 2), torch.tensor(MTP_WEIGHTS[:2])
    try:
        torch.compile(tg.HeadLoss.apply, backend="aot_eager", fullgraph=True)(x, w, targets, weights, fp8).backward()
    finally:
        torch._dynamo.reset()
    assert x.grad is not None and w.grad is not None


def test_mlp_and_its_gradients_equal_autograd_of_the_formula():
    """ReluSquareMLP's backward (the hidden gradient from the kept activation's square root, the three matmuls)
    against autograd of relu(x fc^T)^2 proj^T, in float64; and, compiled in one graph with fullgraph, the
    same numbers (its two operators are opaque to dynamo: a graph break would run the block eagerly). FP8 has
    its own test below."""
    torch.manual_seed(0)
    x, fc, proj = torch.randn(70, 32).double(), torch.randn(128, 32).double(), torch.randn(32, 128).double()
    grad = torch.randn(70, 32).double()
    ref_inputs = [t.clone().requires_grad_() for t in (x, fc, proj)]
    ref = F.linear(F.relu(F.linear(ref_inputs[0], ref_inputs[1])).square(), ref_inputs[2])
    want = (ref, *torch.autograd.grad(ref, ref_inputs, grad))
    assert (F.linear(x, fc) < 0).any() and (F.linear(x, fc) > 0).any()
    torch._dynamo.reset()
    try:
        for mlp in (tg.ReluSquareMLP.apply, torch.compile(tg.ReluSquareMLP.apply, backend="aot_eager", fullgraph=True)):
            inputs = [t.clone().requires_grad_() for t in (x, fc, proj)]
            out = mlp(*inputs, False)
            got = (out, *torch.autograd.grad(out, inputs, grad))
            for a, b in zip(got, want):
                assert rel_error(a, b) < 1e-12
    finally:
        torch._dynamo.reset()


INTERPRETED_KERNEL_CHECK = """
import torch, train_gpt as tg
torch.manual_seed(0)
# tiles small enough for the interpreter, 4 row-tiles a group
tg.MLP_TILES[torch.float32] = dict(BM=32, BN=32, BK=16, num_warps=4, num_stages=2, GROUP=3)
for M in (100, 96, 7):  # rows: not a multiple of BM, a multiple, fewer than one tile
    x, fc, proj, grad = torch.randn(M, 64), 0.2 * torch.randn(128, 64), torch.randn(48, 128), torch.randn(M, 48)
    scale = torch.tensor(0.7)
    post, scaled, grad_pre = (torch.full((M, 128), float("nan")) for _ in range(3))
    tg.relu_square_matmul(x, fc.T, post)
    tg.relu_square_matmul(x, fc.T, scaled, scale=scale)  # as the FP8 operands are
    tg.relu_square_matmul(grad, proj, grad_pre, post)
    pre = x.double() @ fc.double().T
    want_pre = (grad.double() @ proj.double()) * 2 * pre.relu()
    checks = [(post, pre.relu().square()), (scaled, (0.7 * pre).relu().square()), (grad_pre, want_pre)]
    if M % 4 == 0:  # the copies alone (the FP8 backward's; float32 here), at a scale, in both layouts: TMA
        # needs the transposed copy's rows (M elements) 16-byte aligned
        copy, copy_t = torch.full((M, 128), float("nan")), torch.full((128, M), float("nan"))
        tg.relu_square_matmul(grad, proj, post=post, copy=copy, copy_t=copy_t, copy_scale=torch.tensor(0.25))
        checks += [(copy, 4 * want_pre), (copy_t, 4 * want_pre.T)]
    for got, want in checks:
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-6, M
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton (not in CPU builds)")
def test_relu_square_matmul_kernel_in_triton_interpreter():
    """The fused MLP kernel's grouping, its persistent loop (4 programs in the interpreter, up to 16 tiles),
    rows past the last whole tile (TMA's bounds), both epilogues and the scaled copies in both layouts, run
    by Triton's interpreter on the CPU in float32 (its bf16 loads are wrong there): tests/test_gpu.py checks
    it in bf16 and FP8 on a GPU."""
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    result = subprocess.run([sys.executable, "-c", INTERPRETED_KERNEL_CHECK], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def e8(t, scale, dtype):
    """t rounded to FP8 `dtype` at scale (clamped at its largest value), back in float32."""
    top = torch.finfo(dtype).max
    return (t.float() / scale).clamp(-top, top).to(dtype).float() * scale


def test_fp8_mlp_runs_all_six_matmuls_on_its_operands_rounded_at_their_scales():
    """ReluSquareMLP with fp8 on the CPU (the reference path). Forward: the activation is that of x and fc
    rounded to e4m3 at their scales (x at sqrt(dim) / 448, fc at amax / 448, none saturating); the output is
    that activation and proj rounded to e4m3 (at the bound of the activation and at amax / 448), multiplied.
    Backward: the output's gradient in e5m2 at its amax; the pre-activation's gradient, from it, proj's e4m3
    and the e4m3 activation (the forward's product's operand, the only copy kept), in e5m2 at its
    Cauchy-Schwarz bound, which no value reaches; each gradient the product of those rounded operands. Both
    within FP8's error of the exact ones; compiled in one graph, the same numbers."""
    torch.manual_seed(0)
    x = tg.rms_norm(torch.randn(80, 64)).bfloat16()
    fc, proj = (0.1 * torch.randn(256, 64)).bfloat16(), (0.1 * torch.randn(64, 256)).bfloat16()
    grad = torch.randn(80, 64).bfloat16()
    inputs = [t.clone().requires_grad_() for t in (x, fc, proj)]
    out = tg.ReluSquareMLP.apply(*inputs, True)
    got = torch.autograd.grad(out, inputs, grad, retain_graph=True)
    torch._dynamo.reset()
    try:  # one graph (its operators opaque to dynamo), the same numbers
        compiled = torch.compile(tg.ReluSquareMLP.apply, backend="aot_eager", fullgraph=True)
        again = [t.clone().requires_grad_() for t in (x, fc, proj)]
        out_again = compiled(*again, True)
        assert all(torch.equal(a, b) for a, b in
                   zip((out, *got), (out_again, *torch.autograd.grad(out_again, again, grad))))
    finally:
        torch._dynamo.reset()
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2
    x_scale, fc_scale = 64**0.5 / 448, fc.float().abs().max() / 448
    x8, fc8 = e8(x, x_scale, e4), e8(fc, fc_scale, e4)
    post = F.relu(x8 @ fc8.T).square()
    assert (fc.float() / fc_scale).abs().max() == 448 and (x.float() / x_scale).abs().max() < 448
    # the output projection's operands: post at the bound dim * max |fc_i|^2 / 448, which no value reaches
    post_bound, proj_scale = 64 * fc.float().square().sum(1).max(), proj.float().abs().max() / 448
    assert post.max() < post_bound
    post8, proj8 = e8(post, post_bound / 448, e4), e8(proj, proj_scale, e4)
    assert rel_error(out, F.linear(post8, proj8)) < 1e-2
    assert rel_error(out, F.linear(post, proj.float())) > 1e-3  # and not the bf16 product
    exact = F.linear(F.relu(F.linear(x.double(), fc.double())).square(), proj.double())
    assert 1e-3 < rel_error(out, exact) < 0.15  # FP8 moved it, not much
    grad8 = e8(grad, grad.float().abs().max() / 57344, e5)
    grad_pre = (grad8 @ proj8) * 2 * post8.sqrt()  # from the e4m3 activation
    pre_bound = grad.float().norm(dim=1).max() * proj.float().norm(dim=0).max() * 2 * post_bound.sqrt()
    assert grad_pre.abs().max() < pre_bound / 8  # the bound: loose, never reached
    grad_pre8 = e8(grad_pre, pre_bound / 57344, e5)
    want = (grad_pre8 @ fc8, grad_pre8.T @ x8, grad8.T @ post8)
    exact_inputs = [t.detach().double().requires_grad_() for t in (x, fc, proj)]
    exact_out = F.linear(F.relu(F.linear(exact_inputs[0], exact_inputs[1])).square(), exact_inputs[2])
    exact_grads = torch.autograd.grad(exact_out, exact_inputs, grad.double())
    for a, b, c in zip(got, want, exact_grads):
        assert a.dtype == torch.bfloat16 and rel_error(a, b) < 1e-2
        assert 1e-2 < rel_error(a, c) < 0.15  # FP8 moved them, not much
    mlp = tg.MLP(64, fp8=True).bfloat16()  # validation: no FP8
    with torch.no_grad():
        assert torch.equal(mlp(x), tg.ReluSquareMLP.apply(x, mlp.fc.weight, mlp.proj.weight, False))


def test_fp8_mlp_at_initialisation_is_finite_with_its_zero_output_projection():
    """At step 0 proj is all zeros (zero_init): its scale must not be 0, or e4m3(0 / 0) is NaN everywhere."""
    torch.manual_seed(0)
    mlp = tg.MLP(64, fp8=True).bfloat16()
    assert not mlp.proj.weight.any()
    x = tg.rms_norm(torch.randn(70, 64)).bfloat16()
    inputs = [t.clone().requires_grad_() for t in (x, mlp.fc.weight, mlp.proj.weight)]
    out = tg.ReluSquareMLP.apply(*inputs, True)
    assert not out.any()
    grads = torch.autograd.grad(out, inputs, torch.randn(70, 64).bfloat16())
    assert all(g.isfinite().all() for g in grads) and grads[2].abs().sum() > 0


def test_fp8_head_loss_matches_float_reference_on_cpu():
    """The FP8 head at its fixed scales (CPU _scaled_mm; the full-size check on a GPU is in test_gpu.py)."""
    torch.manual_seed(0)
    x = tg.rms_norm(torch.randn(256, 768)).bfloat16().requires_grad_()
    w = (0.05 * torch.randn(4096, 768)).clamp(-0.8, 0.8).requires_grad_()
    targets = mtp_targets(256, 4096, 3)
    loss = tg.HeadLoss.apply(x, w, targets, torch.tensor(MTP_WEIGHTS), True)
    x2, w2 = (t.detach().double().requires_grad_() for t in (x, w))
    ref = reference_head_loss(x2, w2, targets, MTP_WEIGHTS)
    next_token = reference_head_loss(x2, w2, targets[:, 0]).item()
    assert abs(loss.item() - next_token) < 0.01 * next_token
    loss.backward()
    ref.backward()
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()  # noqa: E731
    assert x.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.float32
    assert rel(x.grad, x2.grad) < 0.1 and rel(w.grad, w2.grad) < 0.1


@pytest.fixture
def private_caches(monkeypatch):
    """load_compile_cache sets the cache variables unless given: a private environment, and none given."""
    monkeypatch.setattr(os, "environ", environment_without_cache_dirs())
    monkeypatch.setattr(tg, "GIVEN_CACHE_DIRS", dict.fromkeys(tg.GIVEN_CACHE_DIRS))


LOAD_COMPILE_CACHE = """
import os, sys, train_gpt as tg
tg.load_compile_cache(sys.argv[1], 0, print)
print(os.environ["TORCHINDUCTOR_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"])
"""


def test_compile_cache_holds_the_caches_though_importing_inductor_set_its_default(tmp_path):
    """Importing torch._inductor sets TORCHINDUCTOR_CACHE_DIR to its default (/tmp/torchinductor_<user>), before
    load_compile_cache runs: a process whose environment named no caches must still get Inductor's and Triton's
    inside --compile_cache, so that a new directory is a cold start, as start-up measurements assume; one that
    named its own keeps it. In a fresh process, as a run starts."""
    env = environment_without_cache_dirs()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    command = [sys.executable, "-c", LOAD_COMPILE_CACHE, str(tmp_path / "cc")]

    def run():
        return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.split()

    gpu0 = tg.cache_name(0)  # "gpu0.train_gpt": the process imports train_gpt
    assert run() == [str(tmp_path.resolve() / "cc" / "inductor" / gpu0), str(tmp_path.resolve() / "cc" / "triton")]
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "mine")
    assert run() == [str(tmp_path / "mine" / gpu0), str(tmp_path.resolve() / "cc" / "triton")]


def test_each_gpu_and_a_program_apart_from_an_importer_keep_their_own_part_of_a_compile_cache(monkeypatch):
    """Dynamo's cache, inside Inductor's, keeps one entry per compiled function, whatever the GPU or the module
    the function came from: ranks sharing a folder would write over each other's entries, and a program that
    loaded the entries of a process importing train_gpt failed at their first call."""
    names = {tg.cache_name(0), tg.cache_name(1)}
    monkeypatch.setattr(tg, "__name__", "__main__")  # as train_gpt.py run as a program
    names |= {tg.cache_name(0), tg.cache_name(1)}
    assert len(names) == 4 and tg.cache_name(0) == "gpu0"
    assert tg.artifacts_file("cc", 0) == Path("cc/artifacts.gpu0.bin")


@pytest.mark.parametrize("content", [None, b"not a cache", bytes(range(256)) * 16], ids=["none", "text", "binary"])
def test_compile_cache_that_cannot_be_loaded_warns_and_goes_on(content, tmp_path, private_caches):
    """Missing artifacts are a first run (no warning, reported as cold); a corrupt one must warn, not crash
    and not pass silently (PyTorch returns None for it rather than raising)."""
    if content is not None:
        tg.artifacts_file(tmp_path, 0).write_bytes(content)
    messages = []
    assert tg.load_compile_cache(tmp_path, 0, messages.append) == (content is not None)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path.resolve() / "inductor" / tg.cache_name(0))
    if content is None:
        assert messages == []
    else:
        assert len(messages) == 1 and messages[0].startswith("warning: compile cache")


def test_compile_cache_loads_artifacts_once_into_the_caches_that_hold_them(tmp_path, monkeypatch, private_caches):
    """Artifacts already loaded into (or saved from) Inductor's cache are not loaded again; new ones are, and
    so are the same ones into a cache that was wiped. Each GPU has its own: GPU 1 does not load GPU 0's, and
    Inductor's cache, which holds Dynamo's (one entry per compiled function, whatever the GPU), is a folder per
    GPU."""
    loads = []
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda content: loads.append(content) or "info")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"saved", "info"))
    gpu0, gpu1 = tg.artifacts_file(tmp_path, 0), tg.artifacts_file(tmp_path, 1)
    gpu0.write_bytes(b"first")
    for _ in range(2):
        assert tg.load_compile_cache(tmp_path, 0, print)
    assert loads == [b"first"]
    assert not tg.load_compile_cache(tmp_path, 1, print) and loads == [b"first"]  # cold: nothing for GPU 1
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path.resolve() / "inductor" / tg.cache_name(1))
    gpu0.write_bytes(b"second")
    tg.load_compile_cache(tmp_path, 0, print)
    assert loads == [b"first", b"second"]
    tg.load_compile_cache(tmp_path, 1, print)  # as GPU 1's run does before it saves
    tg.save_compile_cache(tmp_path, 1)
    assert gpu0.read_bytes() == b"second"  # GPU 1's save leaves GPU 0's alone
    tg.load_compile_cache(tmp_path, 1, print)
    tg.load_compile_cache(tmp_path, 0, print)
    assert gpu1.read_bytes() == b"saved" and len(loads) == 2
    shutil.rmtree(tmp_path / "inductor" / tg.cache_name(1))
    tg.load_compile_cache(tmp_path, 1, print)
    assert loads[-1] == b"saved" and len(loads) == 3


def test_dynamos_frames_saved_by_another_source_or_torch_are_deleted_before_they_can_load(tmp_path, monkeypatch,
                                                                                         private_caches):
    """Dynamo checks a saved frame against the source lines it traced, not against compile_regions' settings or
    compiled's flags: a run must load only frames that its own train_gpt.py and torch saved, delete the others
    (and those saved with no stamp) with a line in the log, and keep the rest of Inductor's cache."""
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"saved", "info"))
    messages = []
    tg.load_compile_cache(tmp_path, 0, messages.append)
    frames, stamp = tg.dynamo_frames(), tg.artifacts_file(tmp_path, 0).with_suffix(".stamp")
    assert frames == tmp_path.resolve() / "inductor" / tg.cache_name(0) / "dynamo"

    def saved_frames():  # a compiled function's frames, as a run saves them
        (frames / "entry").mkdir(parents=True, exist_ok=True)
        tg.save_compile_cache(tmp_path, 0)

    saved_frames()
    tg.load_compile_cache(tmp_path, 0, messages.append)
    assert (frames / "entry").is_dir() and messages == []
    edited = tmp_path / "train_gpt.py"
    edited.write_text((ROOT / "train_gpt.py").read_text() + "# a setting changed\n")
    for change in ("source", "torch", "no stamp"):
        saved_frames()
        with monkeypatch.context() as m:
            if change == "source":
                m.setattr(tg, "__file__", str(edited))
            elif change == "torch":
                m.setattr(torch, "__version__", "0.0.0")
            else:
                stamp.unlink()
            tg.dynamo_stamp.cache_clear()
            tg.load_compile_cache(tmp_path, 0, messages.append)
        tg.dynamo_stamp.cache_clear()
        assert not frames.exists() and tg.artifacts_in_cache(0).is_file(), change
        assert len(messages) == 1 and "traced again" in messages.pop(), change


def test_dynamos_frames_that_loaded_artifacts_bring_are_kept_only_from_this_source(tmp_path, monkeypatch,
                                                                                    private_caches):
    """The artifacts hold Dynamo's frames too, and loading them (a fresh machine, or Inductor's cache wiped)
    writes those into Dynamo's folder: they must be deleted unless the artifacts came from this source, and kept
    then, by this run and the next."""
    messages, edited = [], tmp_path / "edited.py"
    edited.write_text((ROOT / "train_gpt.py").read_text() + "# a setting changed\n")
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"saved", "info"))
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts",  # as PyTorch writes the frames they hold
                        lambda content: (tg.dynamo_frames() / "key" / "entry").mkdir(parents=True) or "info")
    inductor = tmp_path / "inductor"
    for source, kept in ((edited, False), (ROOT / "train_gpt.py", True)):
        with monkeypatch.context() as m:  # a run of `source` saves its artifacts
            m.setattr(tg, "__file__", str(source))
            tg.dynamo_stamp.cache_clear()
            tg.load_compile_cache(tmp_path, 0, messages.append)
            tg.save_compile_cache(tmp_path, 0)
        tg.dynamo_stamp.cache_clear()
        shutil.rmtree(inductor)  # a fresh machine: the artifacts alone
        assert tg.load_compile_cache(tmp_path, 0, messages.append)
        frames, stamp = tg.dynamo_frames(), tg.artifacts_file(tmp_path, 0).with_suffix(".stamp")
        assert (frames / "key" / "entry").is_dir() == kept, source
        assert (stamp.read_text() == tg.dynamo_stamp()) == kept, source
        assert sum("traced again" in message for message in messages) == (not kept), source
        messages.clear()
    tg.load_compile_cache(tmp_path, 0, messages.append)  # the next run keeps them
    assert (frames / "key" / "entry").is_dir() and messages == []


def test_a_run_keeps_bytecode_beside_the_script_from_before_torch_is_imported(tmp_path):
    """Under PYTHONDONTWRITEBYTECODE (as on the lent GPU machines) the script, run as a program, has the
    bytecode of torch itself written into .bytecode beside it, not beside the sources, and its child processes
    inherit that. Imported as a module (tests, benchmarks), it leaves the interpreter's settings alone. A stand-in
    torch package, found first, reports the settings at the moment the script imports torch and stops it there
    (the real one took 19 s of the suite to compile into bytecode)."""
    script = tmp_path / "train_gpt.py"
    shutil.copy(ROOT / "train_gpt.py", script)
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "import os, sys\n"
        "print(os.environ.get('PYTHONPYCACHEPREFIX'), 'PYTHONDONTWRITEBYTECODE' in os.environ, sys.pycache_prefix,\n"
        "      sys.dont_write_bytecode)\n"
        "raise SystemExit\n")
    code = "import runpy, sys; run_name = sys.argv.pop(); runpy.run_path(sys.argv[1], run_name=run_name)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"} | {"PYTHONDONTWRITEBYTECODE": "1"}
    bytecode = str(tmp_path / ".bytecode")
    for run_name, expected in [("imported", ["None", "True", "None", "True"]),
                               ("__main__", [bytecode, "False", bytecode, "False"])]:
        out = subprocess.run([sys.executable, "-c", code, str(script), run_name], env=env, cwd=tmp_path,
                             capture_output=True, text=True, check=True).stdout.split()
        assert out == expected
    assert len(list((tmp_path / ".bytecode").rglob("torch/__init__.*.pyc"))) == 1
    assert not (tmp_path / "__pycache__").exists() and not (tmp_path / "torch" / "__pycache__").exists()


def test_key_offset_takes_the_position_free_dimensions_from_the_previous_token():
    """Long-window layers only: dimensions with a rotary frequency keep their own key, the others take the
    previous token's (the first token keeps its own), so one query-key product sees two tokens' content."""
    torch.manual_seed(0)
    rotary = tg.Rotary(32, max_len=16)
    plain, offset = (tg.Attention(64, 32, rotary, False, key_offset=flag) for flag in (False, True))
    offset.load_state_dict(plain.state_dict())
    x = torch.randn(16, 64)
    (_, k, v), (_, k_off, v_off) = plain.project(x, None), offset.project(x, None)
    still = rotary.stationary
    assert still.sum() == 16 and still[8:16].all() and not still[:8].any()  # half the pairs, both halves
    assert torch.equal(k_off[:, :, ~still], k[:, :, ~still]) and torch.equal(v_off, v)
    assert torch.equal(k_off[1:, :, still], k[:-1, :, still]) and torch.equal(k_off[0], k[0])


def test_fp8_attention_projects_its_operands_rounded_to_e4m3_and_back_propagates_in_bf16():
    """With fp8, attention's q, k, v projection multiplies x rounded to e4m3 at sqrt(dim) / 448 (x is
    RMS-normalised) and the weight at its amax / 448; its gradients are the bf16 products of the unrounded
    operands. Without gradients (validation) it is the bf16 product; compiled, one graph and the same numbers."""
    torch.manual_seed(0)
    attn = tg.Attention(64, 32, tg.Rotary(32, max_len=96), True).bfloat16()
    x = tg.rms_norm(torch.randn(96, 64)).bfloat16().requires_grad_()
    w = attn.qkv.flatten(0, 1)
    out = tg.NormedLinearFP8.apply(x, w)
    x_scale, w_scale = 64**0.5 / 448, w.detach().float().abs().max() / 448
    rounded = F.linear(e8(x, x_scale, torch.float8_e4m3fn), e8(w, w_scale, torch.float8_e4m3fn))
    assert out.dtype == torch.bfloat16 and rel_error(out, rounded) < 1e-2
    assert rel_error(out, F.linear(x.float(), w.float())) > 1e-2  # FP8 moved it
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, w), grad)
    assert torch.equal(got[0], grad @ w.detach()) and torch.equal(got[1], grad.T @ x.detach())
    q, k, v = attn.project(x, None)
    assert rel_error(v, attn.value_scale * out.view(96, 6, 32)[:, 4:]) < 1e-2
    with torch.no_grad():
        assert torch.equal(attn.project(x, None)[2], attn.value_scale * F.linear(x, w).view(96, 6, 32)[:, 4:])
    torch._dynamo.reset()
    try:
        compiled = torch.compile(tg.NormedLinearFP8.apply, backend="aot_eager", fullgraph=True)
        again = x.detach().clone().requires_grad_()
        out_again = compiled(again, w)
        assert torch.equal(out_again, out)
        assert torch.equal(torch.autograd.grad(out_again, again, grad)[0], got[0])
    finally:
        torch._dynamo.reset()


def test_exclusive_self_attention_removes_each_heads_component_along_its_own_value():
    """xsa = 0 leaves the output as it was but learns (tanh' is 1 there); otherwise each head's output loses
    tanh(xsa) of its projection on the token's own value, and with tanh(xsa) = 1 it is orthogonal to it."""
    torch.manual_seed(0)
    attn = tg.Attention(64, 32, tg.Rotary(32, max_len=8), False)
    with torch.no_grad():
        attn.out.weight.copy_(torch.eye(64))  # the output is then half (sigmoid(0)) of the gated y, flattened
    x, y, v = torch.randn(8, 64), torch.randn(8, 2, 32), torch.randn(8, 2, 32)
    out = attn.finish(x, y, v)
    assert torch.allclose(out, 0.5 * y.flatten(1))
    out.square().sum().backward()
    assert (attn.xsa.grad != 0).all()
    with torch.no_grad():
        attn.xsa.copy_(torch.tensor([0.7, 30.0]))  # tanh: 0.604 and 1 (to float precision)
        out = 2 * attn.finish(x, y, v).view(8, 2, 32)
    for t in range(8):
        for h, strength in enumerate(torch.tanh(attn.xsa)):
            expected = y[t, h] - strength * (y[t, h] @ v[t, h]) / (v[t, h] @ v[t, h]) * v[t, h]
            assert torch.allclose(out[t, h], expected, atol=1e-5)
    assert (out[:, 1] * v[:, 1]).sum(-1).abs().max() < 1e-4


def test_smear_adds_a_gated_share_of_the_previous_token_and_starts_as_a_no_op():
    torch.manual_seed(0)
    model = tg.GPT(SMOKE, fp8=False)
    e = torch.randn(10, SMOKE.model_dim)
    assert torch.equal(model.smear(e), e)  # lambda starts at zero
    with torch.no_grad():
        model.smear_lambda.fill_(0.7)
        model.smear_gate.weight.normal_()
    out = model.smear(e)
    w = model.smear_gate.weight[0]
    for t in range(10):
        expected = e[t] if t == 0 else e[t] + 0.7 * torch.sigmoid(e[t, :12] @ w) * e[t - 1]
        assert torch.allclose(out[t], expected, atol=1e-6)
    assert tg.param_config("smear_gate.weight").lr_mul == 0.01 and tg.param_config("smear_lambda").wd_mul == 0


def test_a_gate_is_its_channels_times_its_weight_taken_as_a_batched_matmul_over_chunks_of_the_tokens(monkeypatch):
    """Gate: x @ weight.T, in value and gradients, at any token count. The tokens come in gcd(tokens, 64) chunks,
    so that the weight's gradient is a sum of small matmuls, none over every token. Every gate of the model is one."""
    chunked, bmm = [], torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda a, b: chunked.append(tuple(a.shape)) or bmm(a, b))
    torch.manual_seed(0)
    gate = tg.Gate(12, 6)
    with torch.no_grad():
        gate.weight.normal_()
    for tokens, chunks in ((192, 64), (40, 8), (15, 1)):
        x, dy = torch.randn(tokens, 20), torch.randn(tokens, 6)
        mine, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        weight = gate.weight.detach().clone().requires_grad_()
        gate.weight.grad = None
        y = gate(mine[:, :12])
        (y * dy).sum().backward()
        ((theirs[:, :12] @ weight.T) * dy).sum().backward()
        assert chunked[-1] == (chunks, tokens // chunks, 12)
        assert rel_error(y, theirs[:, :12] @ weight.T) < 1e-6
        assert rel_error(gate.weight.grad, weight.grad) < 1e-6 and rel_error(mine.grad, theirs.grad) < 1e-6
    model = tg.GPT(SMOKE, fp8=False)
    gates = [model.smear_gate] + [getattr(block.attn, name) for block in model.blocks if block.attn is not None
                                  for name in ("gate", "value_gate") if getattr(block.attn, name) is not None]
    assert len(gates) > 3 and all(isinstance(gate, tg.Gate) for gate in gates)


def test_the_smear_gate_reads_every_token_so_that_its_chunks_divide_the_batch(monkeypatch):
    """The smear's share for tokens 1.. comes from the gate over all tokens, the first's dropped: over tokens 1..
    alone, an even micro-batch left an odd count, a single chunk."""
    chunked, bmm = [], torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda a, b: chunked.append(tuple(a.shape)) or bmm(a, b))
    model = tg.GPT(SMOKE, fp8=False)
    model.smear(torch.randn(128, SMOKE.model_dim))
    assert chunked == [(64, 2, 12)]


def block_calls(model):
    """Run the model on one document of 64 random tokens; return the tokens and, per layer, the arguments its
    block was called with and what it returned."""
    args, outputs = {}, {}

    def record(i):
        def hook(module, block_args, out):
            args[i], outputs[i] = block_args, out
        return hook

    hooks = [block.register_forward_hook(record(i)) for i, block in enumerate(model.blocks)]
    inputs = torch.randint(0, 50257, (64,), dtype=torch.int32)
    bounds = tg.SequenceBoundaries(torch.tensor([0, 64], dtype=torch.int32), 64)
    model(micro_batch(inputs, inputs, bounds), tg.StepState((64, 64), (64,), tied=True))
    for hook in hooks:
        hook.remove()
    return inputs, args, outputs


ELEVEN = "LssLSSMSssl"  # the 11 layers before #92's removals: the mechanisms below have something in every layer


def test_the_last_layers_attend_from_the_residual_saved_before_them():
    """With 8 layers, layers 5-7 get the residual stream after layer 4 to attend from (layer 5 has no
    attention, so 6 and 7 use it); their queries, keys and values come from it, their residual goes on."""
    torch.manual_seed(0)
    model = tg.GPT(tg.parse_args(["--smoke", "--layers", "LslSSMsl"]), fp8=False)
    randomise_zero_initialised(model)
    _, args, outputs = block_calls(model)
    seen = {i: block_args[7] for i, block_args in args.items()}
    assert all(seen[i] is None for i in range(5)) and all(seen[i] is outputs[4] for i in range(5, 8))
    block, x, x0, source = model.blocks[7], torch.randn(16, 64), torch.randn(16, 64), torch.randn(16, 64)
    skip = (torch.randn(16, 64), torch.tensor(0.3))
    mixed, normed, q, k, v = block.before_attention(x, x0, None, skip, source)
    assert torch.allclose(mixed, block.mix(x, x0, skip)) and torch.allclose(normed, tg.rms_norm(source))
    for got, expected in zip((q, k, v), block.attn.project(tg.rms_norm(source), None)):
        assert torch.equal(got, expected)


def test_one_skip_connection_from_layer_a_third_up_into_the_layer_without_attention():
    """11 layers: layer 3's output, times 0.5 sigmoid(skip_lambda) (0.0912 at first), joins the residual stream
    entering layer 6, before the embedding is mixed in; no other layer gets a skip."""
    torch.manual_seed(0)
    model = tg.GPT(tg.parse_args(["--smoke", "--layers", ELEVEN]), fp8=False)
    randomise_zero_initialised(model)
    _, args, outputs = block_calls(model)
    skips = {i: block_args[3] for i, block_args in args.items()}
    assert model.blocks[6].attn is None and all(skips[i] is None for i in range(11) if i != 6)
    activations, skip_lambda = skips[6]
    assert activations is outputs[3] and skip_lambda is model.skip_lambda
    assert abs(0.5 * torch.sigmoid(skip_lambda).item() - 0.0912) < 1e-4
    block, x, x0, h3 = model.blocks[6], torch.randn(16, 64), torch.randn(16, 64), torch.randn(16, 64)
    with torch.no_grad():
        block.residual_mix.copy_(torch.tensor([0.8, 0.3]))
    expected = 0.8 * (x + 0.5 * torch.sigmoid(skip_lambda) * h3) + 0.3 * x0
    assert torch.allclose(block.mix(x, x0, (h3, skip_lambda)), expected)


def test_dense_connections_start_as_backout_and_compute_their_formula():
    """The head's input: x + sum_i mu_i source_i, mu = 0.1 (W2 gelu(W1 x) + b) per token. At first (W2 zero)
    exactly x - 0.5 h7; the sources are the stream entering layer 0, those after layers 3, 7, 9, and the
    first value embedding; W2 gets a gradient at once."""
    torch.manual_seed(0)
    model = tg.GPT(tg.parse_args(["--smoke", "--layers", ELEVEN]), fp8=False)
    assert model.dense_layers == (3, 7, 9)
    dense = model.head.dense
    x, sources = torch.randn(16, 64), [torch.randn(16, 64) for _ in range(5)]
    out = dense(x, sources)
    assert torch.allclose(out, x - 0.5 * sources[2], atol=1e-6)
    out.square().sum().backward()
    assert dense.shares.weight.grad.abs().sum() > 0 and not dense.hidden.weight.grad.any()  # W2 is zero
    with torch.no_grad():
        dense.shares.weight.normal_()
        dense.bias.normal_()
    mu = 0.1 * (F.gelu(x @ dense.hidden.weight.T) @ dense.shares.weight.T + dense.bias)
    expected = x + sum(mu[:, i : i + 1] * source for i, source in enumerate(sources))
    assert torch.allclose(dense(x, sources), expected, atol=1e-5)
    assert tg.param_config("head.dense.bias") == tg.ParamConfig("adam", lr_mul=0.25, wd_mul=0.0)
    assert tg.param_config("head.dense.hidden.weight") == tg.ParamConfig("adam", lr_mul=0.25)


def test_five_value_embeddings_feed_layers_1_2_and_the_last_three_through_per_head_gates():
    """11 layers: one table each for layers 1, 2, 8, 9, 10, none elsewhere; each head's value is 0.5 v plus
    2 sigmoid(W [x[:6], ve[:6]]) ve, the gate 1 at first (W zero)."""
    torch.manual_seed(0)
    model = tg.GPT(tg.parse_args(["--smoke", "--layers", ELEVEN]), fp8=False)
    assert model.value_layers == [1, 2, 8, 9, 10] and len(model.value_embeds) == 5
    assert [b.attn is not None and b.attn.value_gate is not None for b in model.blocks] == [
        i in (1, 2, 8, 9, 10) for i in range(11)]
    inputs, args, _ = block_calls(model)
    seen = {i: block_args[2] for i, block_args in args.items()}
    for i in range(11):
        if i in model.value_layers:
            table = model.value_embeds[model.value_layers.index(i)]
            assert torch.equal(seen[i], table(inputs))
        else:
            assert seen[i] is None
    attn = model.blocks[9].attn
    x, ve = tg.rms_norm(torch.randn(16, 64)), torch.randn(16, 64)
    v_plain = tg.Attention.project(attn, x, None)[2]
    assert torch.allclose(tg.Attention.project(attn, x, ve)[2], v_plain + ve.view(16, 2, 32), atol=1e-6)
    with torch.no_grad():
        attn.value_gate.weight.normal_()
    gate = 2 * torch.sigmoid(torch.cat([x[:, :6], ve[:, :6]], dim=-1) @ attn.value_gate.weight.T)  # (16, heads)
    expected = v_plain + gate[:, :, None] * ve.view(16, 2, 32)
    assert torch.allclose(attn.project(x, ve)[2], expected, atol=1e-5)


def test_the_model_reads_its_n_gram_rows_through_the_cache_and_they_start_at_zero():
    """The loader hashes (tests/test_ngram.py checks the hashes and the lookup); the model's table starts at zero
    and its rows reach the residual stream; RowAdam's row of the parameter table holds #92's rates."""
    torch.manual_seed(0)
    model = tg.GPT(SMOKE, fp8=False)
    inputs = torch.tensor([50256, 15496, 995, 50255, 0, 995, 15496], dtype=torch.int32)
    batch = micro_batch(inputs, inputs, tg.SequenceBoundaries(torch.tensor([0, 7], dtype=torch.int32), 7))
    assert len(model.ngram.table) == SMOKE.ngram_rows and not model.ngram(batch).any()
    with torch.no_grad():
        model.ngram.table.normal_()
    model.ngram.fetched = None  # the table was written behind RowAdam's back: the cache must be gathered again
    out = model.ngram(batch)
    rows = batch.ngram_rows.long()
    expected = (model.ngram.table[rows[batch.bigram_slots.long()]] * model.ngram.signs[batch.bigram_signs.long()]
                + model.ngram.table[rows[batch.trigram_slots.long()]] * model.ngram.signs[batch.trigram_signs.long()])
    assert torch.allclose(out, expected)
    assert tg.param_config("ngram.cache") == tg.ParamConfig("rows", lr_mul=70.0, wd_mul=5.0, betas=(0.0, 0.95))
