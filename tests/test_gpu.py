"""Checks of the CUDA-only paths: run on a GPU machine with `python -m pytest tests/test_gpu.py`.
Skipped where there is no GPU (CI)."""
import os
import re
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import train_gpt as tg
from conftest import (ROOT, check_nan_stops_the_run, environment_without_cache_dirs, gradients_as_hooks_see_them,
                      random_documents, read_log, randomise_zero_initialised, rel_error, sorting_order)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True, scope="module")
def as_training_sets_up_its_process():
    """init_process before any test here uses cuBLAS, which reads its workspace variables once: the tests run
    cuBLAS as training does."""
    tg.init_process()


@pytest.mark.parametrize("window", [64, 300, 4096])
def test_varlen_attention_matches_dense(window):
    torch.manual_seed(0)
    T, H, D = 2048, 4, 128
    cu = torch.tensor([0, 1, 700, 701, 1500, 2048], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    seqs = tg.SequenceBoundaries(cu, int((cu[1:] - cu[:-1]).max()))
    out = tg.attention(q, k, v, seqs, window, 0.12)
    ref = tg.dense_attention(q.float(), k.float(), v.float(), cu, window, 0.12)
    assert rel_error(out, ref) < 1e-2
    grad = torch.randn_like(out)
    g_fast = torch.autograd.grad(out, (q, k, v), grad)
    g_ref = torch.autograd.grad(ref, (q, k, v), grad.float())
    for a, b in zip(g_fast, g_ref):
        assert rel_error(a, b) < 2e-2


@pytest.mark.parametrize("terms", [1, 3, 4])
def test_cross_entropy_kernel_equals_reference_formula(terms):
    """The Triton kernels against softcapped_cross_entropy cast to e5m2 by torch, on a row count that is no
    multiple of their tiles, with one target per row, three (the last rows without some), or those and
    a prefix-token column (none in scattered rows): the same loss, the same e5m2 bytes but for rounding
    edges, an exact transpose."""
    torch.manual_seed(0)
    logits = (4 * torch.randn(1000 + tg.CE_TILES["gradient"]["ROWS"] // 2, 50304, device="cuda")).bfloat16()
    nxt = torch.randint(0, 50304, (logits.size(0),), device="cuda", dtype=torch.int32)
    columns = [F.pad(nxt[k:], (0, k), value=-1) for k in range(min(terms, 3))]
    if terms == 4:
        prefix_tokens = tg.load_prefix_table("data/gpt2_prefix_tokens.npy", 50304).cuda()
        columns.append(prefix_tokens[nxt.long()])
    targets = torch.stack(columns, dim=1)
    weights = torch.tensor([1.0, 0.5, 0.25, 0.25][:terms], device="cuda")
    loss, grad, grad_t = tg.softcapped_cross_entropy_fp8(logits, targets, weights)
    ref_loss, ref_grad = tg.softcapped_cross_entropy(logits, targets, weights)
    ref_grad = (ref_grad / tg.HEAD_GRAD_SCALE).to(torch.float8_e5m2)
    assert abs(loss.item() - ref_loss.item()) < 1e-5 * ref_loss.item()
    # the formula and the kernel round exp and sigmoid differently: a few values may sit on a rounding edge
    differ = grad.view(torch.uint8) != ref_grad.view(torch.uint8)
    assert differ.float().mean().item() < 1e-3
    one_step = ref_grad.float()[differ].abs() * 0.25 + 2**-14  # e5m2 keeps 2 mantissa bits
    assert ((grad.float() - ref_grad.float())[differ].abs() <= one_step).all()
    assert torch.equal(grad_t.T.view(torch.uint8), grad.view(torch.uint8))


@pytest.mark.parametrize("tokens", [16384, 1000])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_row_sum_kernels_add_each_token_s_rows_into_out_as_float64_rounded_once(tokens, dtype):
    """add_row_sums' Triton kernels against float64, on Zipf-like ids (a run of one token spans many windows, as
    the commas of a 48K batch do), a token count that is no multiple of the windows, and the model's width (768),
    into a bf16 table's gradient (a value embedding's) or a float32
    one (the head's, while tied): bf16 rows are the exact sums rounded once, but for rounding edges (float32 sums
    in another order), by one step; float32 rows within float32's rounding of the sums; rows of absent tokens
    untouched; and the same result twice (deterministic)."""
    torch.manual_seed(0)
    ids = torch.minimum((50304 * torch.rand(tokens, device="cuda") ** 6).int(), torch.tensor(50303, device="cuda"))
    assert torch.bincount(ids).max() > 2 * tg.ROW_SUM_TILES["WINDOW"]
    grad = torch.randn(tokens, 768, device="cuda").bfloat16()
    out = torch.randn(50304, 768, device="cuda").to(dtype)
    sorted_ids, order = torch.sort(ids, stable=True)
    got, again = out.clone(), out.clone()
    tg.add_row_sums(got, grad, sorted_ids, order)
    tg.add_row_sums(again, grad, sorted_ids, order)
    exact = out.double().index_add(0, ids.long(), grad.double())
    assert torch.equal(got, again)
    absent = torch.ones(50304, dtype=torch.bool, device="cuda")
    absent[ids.long()] = False
    assert torch.equal(got[absent], out[absent])
    if dtype == torch.float32:
        bound = 1e-5 * (out.double().abs() + torch.zeros_like(exact).index_add(0, ids.long(), grad.double().abs()))
        assert ((got.double() - exact).abs() <= bound + 1e-30).all()
        return
    rounded = exact.bfloat16()
    differ = got != rounded
    assert differ.float().mean().item() < 1e-3
    step = rounded.float().abs() * 2**-7  # bf16 keeps 7 mantissa bits
    assert ((got.float() - rounded.float())[differ].abs() <= step[differ]).all()


def test_row_lookup_s_tables_post_accumulate_hooks_see_their_whole_gradients():
    """On the GPU machines' torch: RowLookup returns no gradient for its tables, and autograd still runs their
    post-accumulate hooks (GradientEvents' count of a reduction's parameters) after its backward wrote them, and,
    for a table a matmul also reads (the tied head), after both."""
    torch.manual_seed(0)
    tables = [torch.nn.Parameter(torch.randn(1000, 64, device="cuda").to(dtype)) for dtype in
              (torch.bfloat16, torch.float32)]
    hooked = gradients_as_hooks_see_them(tables)
    ids = torch.randint(0, 1000, (4096,), device="cuda", dtype=torch.int32)
    rows = tg.RowLookup.apply(ids, torch.from_numpy(sorting_order(ids.cpu().numpy())).cuda(), torch.bfloat16, *tables)
    x = torch.randn(8, 64, device="cuda")
    (sum(r.float().sum() for r in rows) + (x @ tables[1].T).sum()).backward()
    assert sorted(hooked) == [0, 1] and all(torch.equal(hooked[i], t.grad) for i, t in enumerate(tables))
    assert torch.equal(tables[0].grad.float().sum(1), 64 * torch.bincount(ids, minlength=1000).float())


def test_fp8_head_loss_matches_float_reference_compiled():
    """Full size, compiled as in training: loss and both gradients of the FP8 head against float64."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("FP8 matmul needs Hopper")
    torch.manual_seed(0)
    x = tg.rms_norm(torch.randn(4096, 768, device="cuda")).bfloat16().requires_grad_()
    w = (0.05 * torch.randn(50304, 768, device="cuda")).clamp(-0.8, 0.8).requires_grad_()
    targets = torch.randint(0, 50304, (4096, 1), device="cuda", dtype=torch.int32)
    weights = torch.ones(1, device="cuda")
    loss = torch.compile(tg.HeadLoss.apply, fullgraph=True)(x, w, targets, weights, True)  # Triton kernel included
    x2, w2 = (t.detach().double().requires_grad_() for t in (x, w))
    ref = F.cross_entropy(23 * torch.sigmoid((x2 @ w2.T + 5) / 7.5), targets[:, 0].long(), reduction="sum")
    assert abs(loss.item() - ref.item()) < 0.01 * ref.item()
    loss.backward()
    ref.backward()
    assert rel_error(x.grad, x2.grad) < 0.1 and rel_error(w.grad, w2.grad) < 0.1


def test_sampled_fp8_head_compiled_matches_float64():
    """The head as the first stages train it: 16,384 tokens, a softmax over 10,240 rows chosen as the loader
    chooses them, FP8, compiled in one graph; loss and gradients against float64 of the softmax over those
    rows, and no gradient for the others."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("FP8 matmul needs Hopper")
    torch.manual_seed(0)
    V, T, P = 50304, 16384, 10240
    head = tg.Head(768, V, fp8=True, prefix_tokens=torch.full((V,), -1, dtype=torch.int32),
                   initial_shares=[], masked=False).cuda()
    with torch.no_grad():
        head.weight.normal_(0, 0.05).clamp_(-0.8, 0.8)
    targets = torch.randint(0, 8000, (T,), dtype=torch.int32)  # fewer distinct targets than rows
    rows = np.empty(P, np.int32)
    assert tg.choose_candidates(targets.numpy(), V, 7, rows)
    candidates = torch.from_numpy(rows).cuda()
    x = torch.randn(T, 768, device="cuda").bfloat16().requires_grad_()
    loss = torch.compile(head, fullgraph=True)(x, [], targets.cuda(), candidates, 1, False, None)
    loss.backward()
    x2 = x.detach().double().requires_grad_()
    w2 = head.weight.detach()[candidates.long()].double().requires_grad_()
    logits = tg.rms_norm(x2) @ w2.T
    ref = F.cross_entropy(23 * torch.sigmoid((logits + 5) / 7.5), torch.searchsorted(candidates, targets.cuda()),
                          reduction="sum")
    ref.backward()
    assert abs(loss.item() - ref.item()) < 0.01 * ref.item()
    assert rel_error(x.grad, x2.grad) < 0.1 and rel_error(head.weight.grad[candidates.long()], w2.grad) < 0.1
    outside = torch.ones(V, dtype=torch.bool, device="cuda")
    outside[candidates.long()] = False
    assert not head.weight.grad[outside].any()


def same_bytes(a, b):
    """Whether two FP8 tensors hold the same bytes (torch.equal takes no FP8)."""
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("tokens", [49152, 1008])
def test_relu_square_matmul_kernel_against_float64(tokens):
    """The fused MLP kernel both ways, at the model's shapes (768 -> 3072) and at a token count that is no
    multiple of its tile (but of 16, as FP8 operands must be), on fresh random bf16 inputs, its outputs poisoned
    first: relu(x fc^T)^2, and the hidden gradient (g proj) * 2 relu(x fc^T) from the kept activation. bf16
    outputs: within ~1e-2. Then FP8 operands (Hopper), both ways, their FP8 copies in both layouts."""
    torch.manual_seed(tokens)
    x = tg.rms_norm(torch.randn(tokens, 768, device="cuda")).bfloat16()
    fc = (0.03 * torch.randn(3072, 768, device="cuda")).bfloat16()
    proj = (0.02 * torch.randn(768, 3072, device="cuda")).bfloat16()
    grad = torch.randn(tokens, 768, device="cuda").bfloat16()
    torch.full((tokens, 3072), float("nan"), device="cuda", dtype=torch.bfloat16)  # freed: the outputs reuse it
    post = tg.relu_square_linear(x, fc)
    pre = x.double() @ fc.double().T
    assert rel_error(post, pre.relu().square()) < 1e-2
    torch.full((tokens, 3072), float("nan"), device="cuda", dtype=torch.bfloat16)
    grad_pre = tg.relu_square_linear_backward(grad, proj, post)
    assert rel_error(grad_pre, (grad.double() @ proj.double()) * 2 * pre.relu()) < 1e-2
    if torch.cuda.get_device_capability() < (9, 0):
        return
    # forward: the exact product of the e4m3 values, scaled, in e4m3 at a scale a quarter of its maximum's (some
    # values clamped at 448), in both layouts, against torch's cast of the exact product
    scales = 768**0.5 / 448, fc.abs().max().item() / 448
    x8, fc8 = tg.to_fp8(x, scales[0]), tg.to_fp8(fc, scales[1])
    torch.full((tokens, 3072), float("nan"), device="cuda", dtype=torch.bfloat16)
    exact = (scales[0] * scales[1] * x8.double() @ fc8.double().T).relu().square()
    post_scale = torch.tensor(exact.max().item() / 4 / 448, device="cuda")
    post8, post8_t = tg.relu_square_linear_fp8(x8, fc8, torch.tensor(scales[0] * scales[1], device="cuda"),
                                               post_scale)
    assert post8.dtype == post8_t.dtype == torch.float8_e4m3fn
    want8 = (exact / post_scale.double()).clamp(max=448)
    assert (post8.float() == 448).any() and rel_error(post8.double(), want8) < 0.05  # e4m3: 3 mantissa bits
    assert same_bytes(post8_t, post8.T)
    # backward: the output's gradient in e5m2, proj in e4m3 (transposed, as the kernel reads it), the activation
    # in e4m3 (its scale's square root in the product's scale), the hidden gradient in e5m2 at a quarter of its
    # maximum's scale (some clamped at 57344), in both layouts
    grad_scale, proj_scale = grad.abs().max().item() / 57344, proj.abs().max().item() / 448
    grad8 = tg.to_fp8(grad, grad_scale, torch.float8_e5m2)
    proj8 = tg.to_fp8(proj, proj_scale)
    post = post8.double() * post_scale.item()
    exact = (grad_scale * proj_scale * grad8.double() @ proj8.double()) * 2 * post.sqrt()
    pre_scale = torch.tensor(exact.abs().max().item() / 4 / 57344, device="cuda")
    torch.full((tokens, 3072), float("nan"), device="cuda", dtype=torch.bfloat16)
    scale = torch.tensor(grad_scale * proj_scale, device="cuda") * post_scale.sqrt()
    pre8, pre8_t = tg.relu_square_linear_backward_fp8(grad8, proj8.T.contiguous(), post8, scale, pre_scale)
    assert pre8.dtype == pre8_t.dtype == torch.float8_e5m2
    want8 = (exact / pre_scale.double()).clamp(-57344, 57344)
    assert (pre8.float().abs() == 57344).any() and rel_error(pre8.double(), want8) < 0.1  # e5m2: 2 mantissa bits
    assert same_bytes(pre8_t, pre8.T)


@pytest.mark.parametrize("fp8", [False, True])
def test_fused_mlp_compiled_matches_float64(fp8):
    """The model's MLP as training runs it (bf16, compiled, the Triton kernels inside, FP8 or not): output and
    the three gradients against float64 autograd of the formula (FP8: its e5m2 gradients, 2 mantissa bits, move
    them about 9 % at these sizes on the CPU's reference path)."""
    if fp8 and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("FP8 matmul needs Hopper")
    torch.manual_seed(0)
    mlp = tg.MLP(768, fp8).cuda()
    torch.nn.init.normal_(mlp.proj.weight, std=0.02)  # zero at initialisation: no gradient would reach x
    x = tg.rms_norm(torch.randn(16384, 768, device="cuda")).bfloat16().requires_grad_()
    grad = torch.randn(16384, 768, device="cuda").bfloat16()
    out = torch.compile(mlp, fullgraph=True, dynamic=False)(x)
    got = (out, *torch.autograd.grad(out, (x, mlp.fc.weight, mlp.proj.weight), grad))
    ref_inputs = [t.detach().double().requires_grad_() for t in (x, mlp.fc.weight, mlp.proj.weight)]
    ref = F.linear(F.relu(F.linear(ref_inputs[0], ref_inputs[1])).square(), ref_inputs[2])
    want = (ref, *torch.autograd.grad(ref, ref_inputs, grad.double()))
    for a, b in zip(got, want):
        assert rel_error(a, b) < (0.15 if fp8 else 2e-2)


def test_compiled_adam_update_equals_eager_and_compiles_once_per_dtype():
    """Adam's compiled update against the same function run eagerly: bf16 slices of several sizes (views into a
    larger parameter, as a rank's share is) and a float32 one, over steps whose step size and decay change,
    as the schedule changes them. Neither a new size nor a new step size, nor the step size's place in its
    tensor, may compile again."""
    torch._dynamo.reset()
    compiled = torch.compile(tg.adam_update, dynamic=True, fullgraph=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for size, dtype in [(1000, torch.bfloat16), (333, torch.bfloat16), (77, torch.bfloat16), (5000, torch.float32)]:
        p = torch.randn(3 * size, device="cuda", generator=g).to(dtype)
        p0, q, (m, v) = p.clone(), p.clone(), (torch.zeros(2, size, device="cuda") for _ in range(2))
        for step in range(1, 4):
            grad = torch.randn(size, device="cuda", generator=g).to(dtype)
            # views of one tensor, as Adam passes them (its groups' values, read when the kernel runs: a CUDA
            # graph replays it); a decay large enough to show
            scheduled = torch.zeros(3, 2, device="cuda")
            scheduled[step - 1] = torch.tensor([0.01 * step, 0.3 * (step - 1)])  # another row each step
            step_size, decay = scheduled[step - 1, 0], scheduled[step - 1, 1]
            compiled(p[size : 2 * size], grad, m[0], v[0], 0.8, 0.95, step_size, decay, 1e-10)
            tg.adam_update(q[size : 2 * size], grad, m[1], v[1], 0.8, 0.95, step_size, decay, 1e-10)
        assert torch.equal(p[:size], q[:size]) and torch.equal(p[2 * size :], q[2 * size :])  # only the view moved
        assert rel_error(m[0], m[1]) < 1e-6 and rel_error(v[0], v[1]) < 1e-6
        assert rel_error(p, q) < 1e-3 and rel_error(p, p0) > 1e-2  # rounding apart, and moved far more
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 2  # bf16 and float32


def test_normuon_applies_its_updates_compiled_as_float64_with_a_graph_per_shape():
    """NorMuon's application, compiled as the training process runs it, on the default model's matrices (Parameters,
    in NorMuon's order: the stacked QKV weights first, then the gates' tiny ones): each matrix stepped by a row of
    its part's bf16 updates, at a learning rate and decay of the part's group, as float64's formula has it, the
    decay only where update and weight have the same sign. A graph for each of the five shapes, each tuned for
    its own size, and not one for each matrix (Parameters, undetached, would make one each)."""
    torch._dynamo.reset()
    args = tg.parse_args(["--ngram_rows", str(tg.NGRAM_SIGN_ROWS)])
    normuon = tg.make_optimizers(tg.build_model(args, torch.device("cuda"), 1), args, 1).normuon
    g = torch.Generator(device="cuda").manual_seed(0)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    normuon.scheduled[:, 1:] = torch.rand(len(normuon.param_groups), 2, device="cuda", generator=g) * 0.5
    with torch.no_grad():
        for i, (group, matrices) in enumerate(normuon.parts):
            updates = torch.randn(len(matrices) + 1, *matrices[0].shape, device="cuda", generator=g).bfloat16()
            lr, decay = normuon.scheduled[group, 1].double(), normuon.scheduled[group, 2].double()
            before = [m.double() for m in matrices]
            wants = [w - lr * u - decay * w * (u * w >= 0) for w, u in zip(before, updates.double())]
            normuon.apply_update(i, updates)
            for matrix, want, w in zip(matrices, wants, before):
                assert rel_error(matrix.double(), want) < 1e-6 and rel_error(matrix.double(), w) > 1e-3
    assert len(normuon.parts) == 5 and torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 5


def test_compiled_row_adam_update_equals_eager_and_compiles_once():
    """RowAdam's compiled arithmetic against the same function run eagerly, over steps that read different numbers
    of rows (as a step's tokens do), last read at different steps, with step sizes and decays that change as the
    schedule changes them: one graph for all of them."""
    torch._dynamo.reset()
    compiled = torch.compile(tg.row_adam_update, dynamic=True, fullgraph=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    table = torch.randn(1000, 64, device="cuda", generator=g).bfloat16()
    second_moment = torch.rand(1000, device="cuda", generator=g)
    last_step = torch.randint(-1, 3, (1000,), device="cuda", generator=g, dtype=torch.int32)
    log_decay = -torch.rand(10, device="cuda", generator=g).double().cumsum(0)
    for step, n in [(3, 300), (4, 517), (5, 64)]:
        rows = torch.randperm(1000, device="cuda", generator=g)[:n]
        grad = torch.randn(n, 64, device="cuda", generator=g).bfloat16()
        scheduled = torch.tensor([step, 0.01 * step, 0.1 * step], device="cuda")
        args = (table, rows, grad, second_moment, last_step, log_decay, scheduled, 0.95, 1e-10)
        (weights, moment), (eager_weights, eager_moment) = compiled(*args), tg.row_adam_update(*args)
        assert rel_error(weights.float(), eager_weights.float()) < 1e-2 and rel_error(moment, eager_moment) < 1e-5
        assert rel_error(weights.float(), table[rows].float()) > 5e-2  # moved far more than rounding
        table[rows], second_moment[rows], last_step[rows] = eager_weights, eager_moment, step
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 1


def normuon_update_float64(grad, momentum_buffer, second_moment, momentum):
    """normuon_update in float64 (the arguments), without its bf16 roundings."""
    from test_model import polar_express_float64
    momentum_buffer.lerp_(grad, 1 - momentum)
    X = polar_express_float64(grad.lerp_(momentum_buffer, momentum))
    rows, cols = X.shape[-2:]
    second_moment.lerp_(X.square().mean(dim=-1 if rows >= cols else -2, keepdim=True), 0.1)
    Y = X * second_moment.rsqrt()
    return Y * X.norm(dim=(-2, -1), keepdim=True) / Y.norm(dim=(-2, -1), keepdim=True)


def test_compiled_normuon_update_is_nearer_float64_than_eager_a_graph_per_shape():
    """NorMuon's update compiled as NorMuon compiles it, on shares of the default size's wide matrices (the gates
    and the MLP's) and a tall one, as one GPU and two ranks have them: no farther from the float64 update than
    the update run as written (which rounds to bf16 between its elementwise steps), and a graph for each shape,
    none shared: one graph for every wide shape took its reductions' split from the first shape's sizes (session
    16: the 6 x 12 gates', 100 ms a step on the MLP's shares). The tiny 6 x 12 gates are judged on the mean of 16
    draws: one draw goes either way (session 17: on an H100 one draw gave 5.3 % against eager's 4.3 %)."""
    torch._dynamo.reset()
    opt = tg.NorMuon([("blocks.0.mlp.fc.weight", torch.zeros(4, 8, device="cuda"))], lr=0.1, wd=0.1)
    g = torch.Generator(device="cuda").manual_seed(0)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    shapes = [(7, 6, 12), (10, 768, 3072), (2, 6, 12), (3, 768, 3072), (2, 768, 3072), (3, 3072, 768)]
    errors = []  # per shape, the mean over its draws: (compiled, eager) against float64
    for shape in shapes:
        rows, cols = shape[-2:]
        neurons = (*shape[:-1], 1) if rows >= cols else (*shape[:-2], 1, cols)
        draws = []
        for _ in range(16 if rows * cols < 100 else 1):
            grad = torch.randn(shape, device="cuda", generator=g)
            buf = 0.1 * torch.randn(shape, device="cuda", generator=g)
            second_moment = torch.rand(neurons, device="cuda", generator=g)
            momentum = torch.tensor(0.95, device="cuda")
            got, eager, want = (f(grad.clone(), buf.clone(), second_moment.clone(), momentum).double()
                                for f in (opt.update, tg.normuon_update,
                                          lambda *t: normuon_update_float64(*(x.double() for x in t))))
            draws.append((rel_error(got, want), rel_error(eager, want)))
        errors.append(tuple(sum(d) / len(draws) for d in zip(*draws)))
        assert errors[-1][0] < min(1.1 * errors[-1][1], 5e-2), (shape, errors[-1])
    assert sum(c for c, _ in errors) < sum(e for _, e in errors)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == len(shapes)


def test_normuon_replays_its_captured_steps_as_the_cpu_computes_them(monkeypatch):
    """On the GPU NorMuon runs a part's arithmetic as written at its first step, captures it at its second and
    replays it from its third, reading the learning rate and momentum from a device tensor: three steps at three
    (lr, momentum) pairs against the CPU's NorMuon, which captures nothing. A value baked into a graph at its
    capture would show at the third step. The CPU's update is compiled too: run as written, its extra bf16
    roundings would put it 2-4 % from the GPU's compiled one."""
    from test_model import muon_parameters, run_normuon_scheduled
    torch._dynamo.reset()  # the update's graphs of earlier tests count towards its recompile limit (8 by default)
    cpu = [p.requires_grad_() for p in muon_parameters()]
    gpu = [p.cuda().requires_grad_() for p in muon_parameters()]
    opt = run_normuon_scheduled(gpu)
    monkeypatch.setattr(tg, "normuon_update", torch.compile(tg.normuon_update, dynamic=False, fullgraph=True))
    run_normuon_scheduled(cpu)
    assert len(opt.graphs.graphs) == 2 * len(opt.parts)  # each part's update and its application
    for p, q, p0 in zip(gpu, cpu, muon_parameters()):
        assert rel_error(p.detach().cpu() - p0, q.detach() - p0) < 2e-2  # bf16 Polar Express on both


def test_adam_replays_its_captured_steps_as_the_formula_says():
    """On the GPU Adam runs a group's step as written at its first call, captures it at its second and replays
    it after, reading the step size and decay from a device tensor: three steps of one parameter, then an untie
    (another set of parameters: another graph) and two more steps of both, against the float64 formula."""
    from test_model import ADAM, reference_adam
    g = torch.Generator().manual_seed(3)
    p0 = torch.randn(40, 8, generator=g)
    grads = [torch.randn(40, 8, generator=g) for _ in range(5)]
    late_grads = [torch.randn(40, 8, generator=g) for _ in range(2)]
    tied, untied = p0.cuda().requires_grad_(), torch.zeros(40, 8, device="cuda").requires_grad_()
    adam = tg.Adam([("head.weight", tied), ("embed.weight", untied)], lr=ADAM["lr"], wd=1.0)
    (group,) = adam.param_groups
    group.update(betas=ADAM["betas"], wd=ADAM["wd"], lr_mul=1.0)

    def set_grad(p, grad):  # in place after the first, as training keeps them: the graphs read them there
        if p.grad is None:
            p.grad = grad.cuda()
        else:
            p.grad.copy_(grad)
    for grad in grads[:3]:
        set_grad(tied, grad)
        adam.step()
    adam.untie(tied)
    for grad, late in zip(grads[3:], late_grads):
        set_grad(tied, grad), set_grad(untied, late)
        adam.step()
    assert len(adam.graphs.graphs) == 2  # the tied group's and the untied group's
    assert rel_error(tied.detach().cpu() - p0, reference_adam(p0, grads) - p0) < 2e-5
    assert rel_error(untied.detach().cpu() - p0, reference_adam(p0, grads[:3] + late_grads) - p0) < 2e-5


def test_compiled_model_equals_eager_model():
    """compile_regions changes no maths: a float32 copy of build_model's model, compiled, against the same
    weights uncompiled, loss and every gradient, in training and in validation. In float32 rounding cannot
    hide a wrong term; in bf16 gradients that cancel to ~1e-4 of their terms (a layer's value_mix, the
    bigram weights) differ by most of their size compiled or not. build_model's own model (bf16, FP8 head,
    whose loss has its own check above) stays within 1 % of the float32 loss."""
    args = tg.parse_args(["--smoke", "--layers", "LssSLSSMSssl", "--model_dim", "256", "--head_dim", "128"])
    device = torch.device("cuda")
    model = tg.build_model(args, device, 1)
    randomise_zero_initialised(model)
    compiled, exact = (tg.GPT(args, fp8=False).to(device) for _ in range(2))
    for m in (compiled, exact):
        m.load_state_dict(model.state_dict())
        m.ngram.table.copy_(model.ngram.table)  # no part of the state: a zero table would leave its gradients zero
    tg.compile_regions(compiled)
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, pin_memory=True, ngram_rows=args.ngram_rows)
    loader = tg.PrefetchLoader(source, device)
    for windows in ((128, 384), (384, 896)):
        state = tg.StepState(windows, (windows[1],), tied=True)
        (micro,) = loader.send(tg.BatchShape(1024, 512, 1))
        losses = [m(micro, state) for m in (compiled, exact, model)]
        for loss in losses:
            loss.backward()
        assert abs(losses[0].item() - losses[1].item()) < 1e-5 * losses[1].item()
        assert abs(losses[2].item() - losses[1].item()) < 1e-2 * losses[1].item()
        for (name, p), q in zip(compiled.named_parameters(), exact.parameters()):
            if name == "embed.weight":  # the head's weight stands in for it while tied
                assert p.grad is None and q.grad is None
                continue
            assert rel_error(p.grad, q.grad) < 1e-3, name
        with torch.no_grad():
            losses = [m(micro, state) for m in (compiled, exact)]
        assert abs(losses[0].item() - losses[1].item()) < 1e-5 * losses[1].item()


def test_prefetch_loader_on_gpu_equals_reference_under_slow_compute(make_shards):
    """The copy stream runs ahead of a compute stream held back by sleep kernels: batches must still equal
    the synchronous reference, which would fail if a host slot were refilled before its copy finished."""
    rng = np.random.default_rng(0)
    pattern = make_shards("gpu", [np.concatenate(random_documents(rng, 400)) for _ in range(3)])
    shapes = [tg.BatchShape(512, 128, 2)] * 30 + [tg.BatchShape(256, 64, 4)] * 30
    source = tg.TrainSource(pattern, 1, 2, repeat=True, pin_memory=True)
    loader = tg.PrefetchLoader(source, torch.device("cuda"))
    reference = tg.synchronous_batches(tg.TrainSource(pattern, 1, 2, repeat=True), shapes)
    for shape, expected in zip(shapes, reference):
        got = loader.send(shape)
        torch.cuda._sleep(2_000_000)  # about a millisecond of compute-stream work after the send
        fields = tg.TOKEN_FIELDS
        copies = [([getattr(m, f).clone() for f in fields], m.seqs.cu_seqlens.clone(), m.seqs.max_len) for m in got]
        for (tensors, cu, max_len), e in zip(copies, expected):
            assert all(torch.equal(t.cpu(), getattr(e, f)) for t, f in zip(tensors, fields))
            assert torch.equal(cu.cpu(), e.seqs.cu_seqlens) and max_len == e.seqs.max_len
    assert loader.copy_stream != torch.cuda.current_stream()


def test_validation_mask_reaches_the_gpu_while_the_steps_stream_is_busy():
    """The mask's bits come back from its process to the GPU while the run trains: the copy must end while the
    stream that queues the steps is kept busy with sleep kernels, from before the mask starts (a copy that
    waited for that stream would never end), and the head's zeros must stay until apply. On torch 2.11 and an
    H100 (session 26) the copy ended so even when issued on the default stream rather than a stream of its own;
    ValidationMask keeps its own stream, which CUDA's ordering rules, not that observation, make safe."""
    merges = tg.load_merge_table(Path(tg.__file__).parent / "data" / "gpt2_merges.npy", 50304)[:1000]
    head = types.SimpleNamespace(never_follows=torch.zeros(50304, 6288, dtype=torch.uint8, device="cuda"))
    # With sleeps queued and no stream made before, ValidationMask's start waited for them to end (session 26):
    # most likely the process's first stream, which a run's loader has made before
    torch.cuda.Stream()
    torch.cuda._sleep(1_000_000_000)  # about half a second
    queued = torch.cuda.Event()
    queued.record()
    mask, deadline = tg.ValidationMask(merges, head), time.monotonic() + 60
    while not mask.arrived.done():  # a sleep is queued before the last one ends: the stream never idles
        assert time.monotonic() < deadline, "the mask's copy did not end while the steps' stream was busy"
        torch.cuda._sleep(1_000_000_000)
        running, queued = queued, torch.cuda.Event()
        queued.record()
        running.synchronize()
    assert not torch.cuda.current_stream().query() and mask.arrived.exception() is None
    bits, pairs = tg.impossible_pairs(merges, 50304)
    assert torch.equal(mask.staged.cpu(), torch.from_numpy(bits)) and not head.never_follows.any()
    assert mask.apply()[0] == pairs and torch.equal(head.never_follows.cpu(), torch.from_numpy(bits))


def test_deferred_loss_read_stops_a_gpu_run_one_step_late_at_most(workdir, monkeypatch):
    """On a GPU the host reads step k's loss after queueing step k + 1 (a pinned copy and an event)."""
    check_nan_stops_the_run(monkeypatch, ["--smoke", "--val_tokens", "1024", "--val_loss_every", "0",
                                          "--compile_cache", ""])


def test_a_warm_start_loads_every_compiled_function_from_dynamos_cache_and_traces_no_graph(tmp_path):
    """Two smoke runs on one compile cache, with a warm-up (the smoke run has none, and a run saves its cache at
    the warm-up's end): the first, cold, traces the graphs and saves them; the second must load from Dynamo's
    cache (compile_regions) what the first traced, trace none itself, print no traceback or warning of PyTorch's
    logs (a frame traced while parameters had gradients failed to load, and its failure is a traceback) or of
    the run's, and train the same losses."""
    for name in ("train_gpt.py", "data"):
        (tmp_path / name).symlink_to(ROOT / name)
    runs = []
    env = environment_without_cache_dirs()
    for _ in range(2):
        done = subprocess.run([sys.executable, "train_gpt.py", "--smoke", "--warmup_steps", "1", "--compile_cache",
                               "cache"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        output = done.stdout + done.stderr
        assert done.returncode == 0 and not re.search(r"Traceback|^W\d{4} |^warning", output, re.M), output[-3000:]
        (log,) = set((tmp_path / "logs").glob("*.txt")) - {path for path, _ in runs}
        runs.append((log, read_log(log)))

    def compile_counts(lines):
        (line,) = [line for line in lines if line.startswith("compile: ")]
        return [int(n) for n in re.match(r"compile: (\d+) graphs traced, (\d+) compiled", line).groups()]

    (traced, _), (traced_again, loaded) = (compile_counts(lines) for _, lines in runs)
    assert traced > 0 and traced_again == 0 and loaded > 0
    cold, warm = ([float(m.group(1)) for m in map(re.compile(r"(?:step:\d+/\d+ |final )val_loss:(\S+) ").match, lines)
                   if m] for _, lines in runs)
    assert cold and len(warm) == len(cold) and all(abs(a - b) < 1e-3 * a for a, b in zip(cold, warm))


def test_graphed_micro_steps_equal_uncaptured_ones():
    """Training steps through MicroStepGraphs (a key's first micro-batch uncaptured, its second captured,
    then replays) leave the same losses and weights as the same steps run uncaptured, across the untie."""
    args = tg.parse_args(["--smoke", "--micro_batch_tokens", "4096", "--batch_tokens", "16384"])
    device = torch.device("cuda")
    graphed = tg.build_model(args, device, 1)
    plain, plain_again = tg.build_model(args, device, 1), tg.build_model(args, device, 1)
    for model in (plain, plain_again):
        model.graphs = None
        model.load_state_dict(graphed.state_dict())
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, pin_memory=True, ngram_rows=args.ngram_rows)
    loader = tg.PrefetchLoader(source, device)
    steps = [tg.untie_step(args) - 1 + i for i in range(4)]  # two tied steps, then two untied

    def kept(micro_batches):  # copies: the loader reuses its buffers; a step's micro-batches share their rows
        rows = micro_batches[0].ngram_rows.clone()
        return [tg.MicroBatch(*(getattr(m, name).clone() for name in tg.TOKEN_FIELDS),
                              tg.SequenceBoundaries(m.seqs.cu_seqlens.clone(), m.seqs.max_len),
                              None if m.candidates is None else m.candidates.clone(), rows) for m in micro_batches]
    batches = [kept(loader.send(tg.BatchShape(4096, 512, 4))) for _ in steps]
    start = {n: p.detach().float().clone() for n, p in plain.named_parameters()}
    losses, weights = [], []
    for model in (graphed, plain, plain_again):
        optimizers = tg.make_optimizers(model, args, 1)
        losses.append([tg.train_step(model, batch, optimizers, step, args, 1).item()
                       for step, batch in zip(steps, batches)])
        weights.append({n: p.detach().float() for n, p in model.named_parameters()})
    assert len(graphed.graphs.graphs) == 4  # tied and untied, each a step's first pass and its later ones
    # Later steps' losses check the updates: a step lost or applied twice moves the loss by about 1e-2 of it
    # here. The last loss, after three updates, differed by 5.9e-5 on an H200 (the nondeterminism below).
    assert losses[0] == pytest.approx(losses[1], rel=5e-4)
    # Weights are compared with the distance the four steps moved them, summed over each optimizer's parameters:
    # a graph holds a micro-batch's whole forward and backward pass, so a step lost or applied twice moves all
    # of them, by about a quarter of the four steps' distance. Smaller sums are no measure: the kernels are not
    # deterministic (FlashAttention's backward), and Polar Express and Adam turn rounding in weak gradient
    # directions into whole updates. Summed over PARAMETER_TABLE's rows, graphed and
    # uncaptured runs differed by up to 43 % of a row's distance (the scalars, on an H100, while two uncaptured
    # runs agreed there to 0.1 %; Adam moves a scalar of near-zero gradient by its full step, either way), 20 %
    # (the value gates) and 13 % (a value embedding); an H200 gave 21 % for one matrix. Summed per optimizer, in
    # one H100 run (graphed against uncaptured, uncaptured twice, graphed twice): NorMuon's 6.7-7.4 %, Adam's
    # 2.1-2.2 %, the n-gram cache's 0.9-1.0 %.
    def distances(a, b):
        squares = {}
        for name in start:
            optimizer = tg.param_config(name).optimizer
            squares[optimizer] = squares.get(optimizer, 0.0) + (a[name] - b[name]).norm().item() ** 2
        return {key: value**0.5 for key, value in squares.items()}

    moved = distances(weights[1], start)
    apart, noise = distances(weights[0], weights[1]), distances(weights[2], weights[1])
    assert set(moved) == {"normuon", "adam", "rows"}
    for key in moved:
        assert apart[key] <= max(0.15 * moved[key], 2 * noise[key]), key


def test_graphed_first_passes_write_the_gradients_that_later_passes_add_into(monkeypatch):
    """MicroStepGraphs over steps of two micro-batches, NorMuon's matrices without gradients before each step as
    train_step leaves them: after each step they hold the sum of its two passes' gradients, as the same passes
    uncaptured from fresh gradients give them, in every mode: uncaptured, captured, replayed, and a replay whose
    first pass runs uncaptured (more sequences than its graph has room for: it adds into its graph's gradients,
    zeroed, where the second pass's graph adds). A first pass that wrote to new memory there would leave the
    second pass's graph adding into the step before's gradients."""
    args = tg.parse_args(["--smoke", "--micro_batch_tokens", "4096", "--batch_tokens", "8192"])
    device = torch.device("cuda")
    model = tg.build_model(args, device, 1)
    randomise_zero_initialised(model)
    matrices = [p for n, p in model.named_parameters() if tg.param_config(n).optimizer == "normuon"]
    loader = tg.PrefetchLoader(tg.TrainSource(args.train_files, 0, 1, repeat=True, pin_memory=True,
                                              ngram_rows=args.ngram_rows), device)
    state = tg.step_state(0, args)
    model.prepare(state)
    seqs_per_graph = tg.GRAPH_TOKENS_PER_SEQ
    for step in range(5):  # uncaptured, captured, replayed, its first pass uncaptured, replayed
        batch = loader.send(tg.BatchShape(4096, 512, 2))
        for p in matrices:
            p.grad = None
        for i, micro in enumerate(batch):
            monkeypatch.setattr(tg, "GRAPH_TOKENS_PER_SEQ", 10**9 if step == 3 and i == 0 else seqs_per_graph)
            model.graphs(micro, state, first=i == 0)
        got = [p.grad.clone() for p in matrices]
        for p in matrices:
            p.grad = None
        for micro in batch:
            tg.forward_backward(model, micro, state)
        for p, grad in zip(matrices, got):
            assert p.grad.abs().max() > 0 and rel_error(grad, p.grad) < 2e-2, step
    assert len(model.graphs.graphs) == 2


def test_work_after_gradient_events_sees_each_replay_s_final_gradients_before_its_backward_pass_ends():
    """GradientEvents under MicroStepGraphs, as with several ranks: work queued with after(params) (their group's
    event: the last layer's two MLP matrices) once a micro-batch is queued must read that micro-batch's final
    gradients (not the previous replay's, not zeros, not a part) in every mode (uncaptured, captured,
    replayed), and on a replay the last layer's must be read while the earlier layers' backward pass still
    runs. The hooks must not break the compiled regions."""
    torch._dynamo.utils.counters.clear()
    args = tg.parse_args(["--smoke", "--model_dim", "768", "--head_dim", "128", "--micro_batch_tokens", "16384",
                          "--batch_tokens", "16384"])
    device = torch.device("cuda")
    model = tg.build_model(args, device, 1)
    randomise_zero_initialised(model)  # a zero projection would leave the fc gradient zero
    last = [model.blocks[-1].mlp.fc.weight, model.blocks[-1].mlp.proj.weight]
    model.grad_events = events = tg.GradientEvents(  # end_pass after each pass: forward_backward's
        [last] + [[p] for n, p in model.named_parameters() if n != "ngram.cache" and all(p is not q for q in last)])
    source = tg.TrainSource(args.train_files, 0, 1, repeat=True, pin_memory=True, ngram_rows=args.ngram_rows)
    loader = tg.PrefetchLoader(source, device)
    state = tg.step_state(0, args)
    model.prepare(state)
    for call in range(4):  # uncaptured, captured, replayed twice
        (micro,) = loader.send(tg.BatchShape(16384, 2048, 1))
        model.zero_grad(set_to_none=False)
        events.begin_step()
        begin, end, read = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        begin.record()
        model.graphs(micro, state, first=True)  # every gradient there: each pass adds into them
        end.record()
        with events.after(last):
            seen = [p.grad.clone() for p in last]
            read.record()
        torch.cuda.synchronize()
        for grad, p in zip(seen, last):
            assert p.grad.abs().max() > 0 and torch.equal(grad, p.grad), call
        if call >= 2:
            assert begin.elapsed_time(read) < begin.elapsed_time(end), call
    assert len(model.graphs.graphs) == 1
    assert not torch._dynamo.utils.counters["graph_break"]


def nccl_adam(rank, world_size, port, out_dir):
    """test_model's sharded Adam steps on GPU `rank` of world_size, through NCCL: saves the parameters after them."""
    from test_model import run_adam
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=torch.device("cuda", rank))
    try:
        torch.save(run_adam(rank, world_size, world_size, device="cuda"), Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_sharded_adam_over_nccl_gathers_in_place_as_one_process_steps(tmp_path):
    """Adam on 2 GPUs through NCCL, its updates compiled and replayed as CUDA graphs, each large parameter
    all-gathered into itself from the slice each rank updated in place: both ranks end with the parameters that
    one process on the CPU computes from the summed gradients (test_model.run_adam), the untied copy included."""
    from test_model import run_adam
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(nccl_adam, args=(2, port, str(tmp_path)), nprocs=2)
    single = run_adam(0, 1, 2)
    for rank in range(2):
        params = torch.load(tmp_path / f"rank{rank}.pt")
        assert len(params) == len(single)
        for p, q in zip(params, single):
            assert rel_error(p, q) < 1e-5, rank
    assert not torch.allclose(single[0], single[-1])  # the untied copy went its own way


def nccl_sharded_table(rank, world_size, port, out_dir, ahead):
    """test_model's sharded-table steps on GPU `rank` of world_size, through NCCL: saves what each fetch brought
    and this rank's shard after the steps, the rows each rank asks of the others exchanged over a gloo group of
    their own, as a training batch's builder exchanges them (TrainSource). ahead: each step's rows are fetched as a
    fetch ahead (the values' exchange left running), then asked for as the forward pass asks for them."""
    from test_model import sharded_table_steps
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=torch.device("cuda", rank))
    try:
        table, plan = sharded_table_steps(world_size)
        with torch.device("cuda"):  # the table in bf16, as in a run
            ngram = tg.NgramTable(len(table), table.size(1), capacity=64, world_size=world_size)
            requests_group = dist.new_group(backend="gloo")
            opt = tg.RowAdam(ngram, tg.param_config("ngram.cache"), lr=0.002, wd=0.5, steps=len(plan))
        with torch.no_grad():
            ngram.table.copy_(table[rank::world_size])
        fetched = []
        for step, per_rank in enumerate(plan):
            read, g = per_rank[rank]
            by_owner = torch.argsort(read % world_size, stable=True)  # as the loader hands them out
            rows, grad = read[by_owner].int().cuda(), g[by_owner].cuda()
            owners = tuple(torch.bincount(read % world_size, minlength=world_size).tolist())
            # the rows the ranks ask of this one, as a training batch's builder exchanges them, then on the GPU
            asked = tg.exchange_row_requests(rows.cpu().numpy(), owners, requests_group)
            asked = tg.RowRequests(asked.counts, *(t.cuda() for t in (asked.rows, asked.distinct, asked.segments)))
            if ahead:
                ngram.fetch_ahead(rows, owners, asked, None)
            ngram.fetch(rows, owners, asked)  # as the forward pass asks: fetched already if ahead
            fetched.append(ngram.cache[: len(rows)].detach().float().cpu())
            ngram.cache.grad = torch.zeros_like(ngram.cache)
            ngram.cache.grad[: len(rows)] = grad.to(ngram.cache.dtype)
            opt.step(rows, step)
        torch.save((fetched, ngram.table.float().cpu()), Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("ahead", [False, True])
def test_sharded_ngram_table_over_nccl_fetches_and_updates_as_one_table_does(tmp_path, ahead):
    """The sharded table's all_to_all exchanges through NCCL on 2 GPUs, in bf16, against one process's float32
    table on the CPU (test_model.run_sharded_table): every fetch, and the shards after 5 steps; with the rows
    fetched ahead too."""
    from test_model import run_sharded_table, sharded_table_steps
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(nccl_sharded_table, args=(2, port, str(tmp_path), ahead), nprocs=2)
    table, plan = sharded_table_steps(2)
    single_fetched, single = run_sharded_table(0, 1, 2)
    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    assembled = torch.empty_like(table)
    for rank, (_, shard) in enumerate(results):
        assembled[rank::2] = shard
    assert rel_error(assembled, single) < 2e-2 and rel_error(assembled, table) > 0.1
    for step, per_rank in enumerate(plan):
        union = torch.cat([read for read, _ in per_rank]).unique()
        for rank, (read, _) in enumerate(per_rank):
            read = read[torch.argsort(read % 2, stable=True)]
            expected = single_fetched[step][torch.searchsorted(union, read)]
            assert results[rank][0][step].shape == expected.shape
            if len(read):
                assert rel_error(results[rank][0][step], expected) < 2e-2, (step, rank)
