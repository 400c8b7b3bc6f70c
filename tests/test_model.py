"""train_gpt.py's maths at tiny sizes on the CPU: orthogonalisation, rotary, attention, Muon (also over
several processes), the model, the command line, the schedules, and the CPU smoke run."""
import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import train_gpt as tg
from conftest import randomise_zero_initialised, rel_error

ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------------------------------
# orthogonalize
#
# The bound verified: the five quintic Newton–Schulz steps map a singular value s of G / |G|_F (Frobenius
# norm) to p(p(p(p(p(s))))) with p(x) = 3.4445 x - 4.7750 x^3 + 2.0315 x^5. In exact arithmetic that lies
# in [0.68, 1.21] for every s >= 2e-3, while smaller s stay small (p multiplies them by at most 3.4445 per
# step). So: every output singular value is at most 1.5, and every one below 0.5 is accounted for by an
# input singular value below 2e-3 |G|_F. Random square matrices have a few of those; 4:1 ones do not.

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


def naive_attention(q, k, v, cu_seqlens, window):
    """Causal sliding-window attention inside each document, one query at a time, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    out = torch.zeros_like(q)
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds, bounds[1:]):
        for i in range(start, end):
            keys = slice(max(start, i - window + 1), i + 1)
            for h in range(q.size(1)):
                logits = tg.ATTENTION_SCALE * (k[keys, h] @ q[i, h])
                out[i, h] = torch.softmax(logits, 0) @ v[keys, h]
    return out


CU_SEQLENS = [[0, 80], [0, 1, 30, 31, 80], [0, 20, 40, 60, 80], [0, 79, 80]]


def random_qkv(T=80, H=2, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [4 * torch.randn(T, H, D, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.parametrize("cu", CU_SEQLENS)
@pytest.mark.parametrize("window", [1, 7, 64, 1000])
def test_dense_attention_matches_naive_reference(cu, window):
    q, k, v = random_qkv()
    cu = torch.tensor(cu, dtype=torch.int32)
    assert torch.allclose(tg.dense_attention(q, k, v, cu, window), naive_attention(q, k, v, cu, window),
                          rtol=0, atol=1e-10)


@pytest.mark.parametrize("window", [7, 1000])
def test_dense_attention_sees_neither_other_documents_nor_the_future(window):
    q, k, v = random_qkv()
    cu = torch.tensor([0, 30, 55, 80], dtype=torch.int32)
    before = tg.dense_attention(q, k, v, cu, window)
    # a token of the second document: the first and the third are untouched, and so are earlier positions
    # of the second; then a token of the third: everything before it is untouched
    for changed, untouched in ((40, [slice(0, 40), slice(55, 80)]), (75, [slice(0, 75)])):
        q2, k2, v2 = (t.clone() for t in (q, k, v))
        for t in (q2, k2, v2):
            t[changed] += 1
        after = tg.dense_attention(q2, k2, v2, cu, window)
        assert not torch.allclose(after[changed], before[changed])
        for positions in untouched:
            assert torch.equal(after[positions], before[positions])


# ----------------------------------------------------------------------------------------------------
# Muon over several processes

MUON_SHAPES = [((3, 16, 16), 5), ((64, 16), 4), ((16, 64), 3)]  # (shape, matrices of that shape)
MUON_LR, MUON_MOMENTUM, MUON_STEPS = 0.02, 0.9, 3


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


def run_muon(rank, world_size, num_shares):
    """MUON_STEPS steps of Muon as rank `rank` of world_size; one process takes the sum of all shares."""
    params = [p.requires_grad_() for p in muon_parameters()]
    opt = tg.Muon(params, lr=MUON_LR, momentum=MUON_MOMENTUM, world_size=world_size)
    for step in range(MUON_STEPS):
        for p, shares in zip(params, gradient_shares(step, num_shares)):
            p.grad = shares[rank] if world_size > 1 else sum(shares)
        opt.step()
    return [p.detach() for p in params]


def muon_worker(rank, world_size, port, out_dir):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        torch.save(run_muon(rank, world_size, world_size), Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world_size", [2, 4])
def test_distributed_muon_equals_single_process(world_size, tmp_path):
    """Groups of 5, 4 and 3 matrices: 5 and 3 are not multiples of 2 or 4, so shares are padded."""
    single = run_muon(0, 1, world_size)
    mp.spawn(muon_worker, args=(world_size, free_port(), str(tmp_path)), nprocs=world_size)
    initial = muon_parameters()
    for rank in range(world_size):
        params = torch.load(tmp_path / f"rank{rank}.pt")
        assert len(params) == len(single)
        for p, q, p0 in zip(params, single, initial):
            assert (q - p0).abs().max() > MUON_LR / 10  # the steps did move the parameters
            assert rel_error(p - p0, q - p0) < 2e-2  # the updates agree to bf16 rounding


# ----------------------------------------------------------------------------------------------------
# The model

SMOKE = tg.parse_args(["--smoke"])


def packed_batch(cu_seqlens, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = cu_seqlens[-1]
    inputs, targets = (torch.randint(0, 50257, (T,), generator=g, dtype=torch.int32) for _ in range(2))
    cu = torch.tensor(cu_seqlens, dtype=torch.int32)
    return inputs, targets, tg.SequenceBoundaries(cu, int((cu[1:] - cu[:-1]).max()))


def test_initial_loss_is_the_summed_uniform_cross_entropy():
    torch.manual_seed(0)
    model = tg.GPT(SMOKE, fp8=False)
    loss = model(*packed_batch([0, 100, 256]), 128)
    assert loss.ndim == 0
    assert abs(loss.item() / 256 - math.log(SMOKE.vocab_size)) < 1e-4  # the head starts at zero


def test_gradient_of_a_batch_is_the_sum_over_its_halves():
    """Documents end at the split: the halves hold the same documents, at other packed positions."""
    torch.manual_seed(0)
    model = tg.GPT(SMOKE, fp8=False)
    with torch.no_grad():  # leave the zero-initialised start, where most gradients vanish
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    inputs, targets, seqs = packed_batch([0, 50, 128, 200, 256], seed=1)
    window = 128  # the long layers see 128 keys, the others 64: shorter than the longest document

    def gradients(parts):
        model.zero_grad()
        for lo, hi, cu in parts:
            bounds = torch.tensor(cu, dtype=torch.int32)
            model(inputs[lo:hi], targets[lo:hi], tg.SequenceBoundaries(bounds, 128), window).backward()
        return [p.grad.clone() for p in model.parameters()]

    whole = gradients([(0, 256, seqs.cu_seqlens.tolist())])
    halves = gradients([(0, 128, [0, 50, 128]), (128, 256, [0, 72, 128])])
    for (name, _), a, b in zip(model.named_parameters(), whole, halves):
        assert a.abs().max() > 0, name
        assert rel_error(b, a) < 1e-4, name


# ----------------------------------------------------------------------------------------------------
# Command line


def test_parse_args_defaults_and_overrides():
    args = tg.parse_args(["--num_iterations", "300", "--train_files", "x_*.bin", "--muon_lr", "0.1"])
    assert (args.num_iterations, args.train_files, args.muon_lr) == (300, "x_*.bin", 0.1)
    assert args.val_files == tg.Hyperparameters().val_files and not args.smoke
    assert tg.parse_args([]) == tg.Hyperparameters()


@pytest.mark.parametrize("argv, expected", [
    ([], False), (["--repeat_train_files"], True), (["--repeat_train_files", "--seed", "3"], True),
    (["--no-repeat_train_files"], False), (["--repeat_train_files", "--no-repeat_train_files"], False),
])
def test_parse_args_booleans(argv, expected):
    assert tg.parse_args(argv).repeat_train_files is expected


def test_smoke_applies_smoke_settings_and_explicit_flags_win():
    args = tg.parse_args(["--num_iterations", "7", "--smoke", "--no-repeat_train_files"])
    for name, value in tg.SMOKE_SETTINGS.items():
        if name not in ("num_iterations", "repeat_train_files"):
            assert getattr(args, name) == value, name
    assert args.num_iterations == 7 and args.repeat_train_files is False and args.smoke
    assert tg.parse_args(["--no-smoke"]) == tg.Hyperparameters()


@pytest.mark.parametrize("argv, message", [
    (["--no_such_flag", "1"], "--no_such_flag: unknown flag"),
    (["num_iterations", "3"], "num_iterations: unknown flag"),
    (["--smoke", "--lr", "1"], "--lr: unknown flag"),
    (["--num_iter", "3"], "--num_iter: unknown flag"),  # no abbreviations: a typo must not pick a flag
    (["--seed"], "--seed: expected one argument"),
    (["--seed", "x"], "--seed: invalid int value: 'x'"),
    (["--repeat_train_files", "false"], "false: unknown flag"),
])
def test_parse_args_errors_name_the_flag(argv, message):
    with pytest.raises(tg.UserError) as excinfo:
        tg.parse_args(argv)
    assert str(excinfo.value).startswith(message) and "--help" in str(excinfo.value)


def test_help_lists_every_flag_with_its_default_and_meaning(capsys):
    with pytest.raises(SystemExit) as excinfo:
        tg.parse_args(["--help"])
    assert excinfo.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    helps = tg.hyperparameter_help()
    for field in dataclasses.fields(tg.Hyperparameters):
        meaning = " ".join(helps[field.name].split())
        assert f"{meaning} (default: {field.default!r})" in text, field.name
        assert (f"--{field.name}, --no-{field.name}" if field.type is bool else f"--{field.name} ") in text


# ----------------------------------------------------------------------------------------------------
# Schedules


@pytest.mark.parametrize("args", [tg.Hyperparameters(), SMOKE], ids=["record", "smoke"])
def test_schedules(args):
    N = args.num_iterations
    steps = range(N + 1)
    lr = [tg.lr_multiplier(s, args) for s in steps]
    cooldown_start = math.ceil((1 - args.cooldown_frac) * N)
    assert all(m == 1.0 for m in lr[:cooldown_start])
    assert lr[N] == pytest.approx(args.final_lr_frac)
    assert all(a >= b for a, b in zip(lr, lr[1:])) and lr[cooldown_start + 1] < 1

    momentum = [tg.muon_momentum(s, args) for s in steps]
    assert momentum[0] == pytest.approx(0.85) and momentum[N] == pytest.approx(0.95)
    assert momentum[args.muon_momentum_warmup_steps] == pytest.approx(0.95)
    assert all(a <= b for a, b in zip(momentum, momentum[1:]))

    windows = [tg.long_window(s, args) for s in steps]
    assert all(w % 128 == 0 and 128 <= w <= args.window_max for w in windows)
    assert windows[0] == 128 and windows[N] == args.window_max
    assert all(a <= b for a, b in zip(windows, windows[1:]))
    assert set(windows) == set(range(128, args.window_max + 1, 128))  # every size is used


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
    assert lines[end + 2].startswith("environment: python=") and f"world_size={world_size} " in lines[end + 2]
    assert lines[end + 3] == "==== nvidia-smi ===="
    rest = lines[lines.index("==== end nvidia-smi ====") + 1:]

    N, every = args["num_iterations"], args["val_loss_every"]
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
    return args, table


def run_in_copy(tmp_path, command):
    """Run `command` where ./train_gpt.py and ./data lead to the repository's, so that logs/ is tmp_path's;
    returns the lines of the one log it wrote, and its run id."""
    for name in ("train_gpt.py", "data"):
        (tmp_path / name).symlink_to(ROOT / name)
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    ranks = [line for line in run.stderr.splitlines() if line.startswith("[rank")]  # torchrun's children
    assert run.returncode == 0, "\n".join(ranks[-40:]) or run.stderr[-3000:]
    (log,) = (tmp_path / "logs").glob("*.txt")
    return log.read_text().splitlines(), log.stem


# Slow: a real training run, about 1-2 minutes on 2 cores (python train_gpt.py --smoke on data/sample).
def test_cpu_smoke_run(tmp_path):
    lines, run_id = run_in_copy(tmp_path, [sys.executable, "train_gpt.py", "--smoke"])
    args, table = check_log_format(lines, run_id, world_size=1)
    N = args["num_iterations"]
    assert table["val", N][0] <= table["val", 0][0] - 1.0


# About 15 seconds: two CPU processes (gloo) train the smoke model for two steps.
def test_two_process_run_with_fewer_validation_chunks_than_ranks(tmp_path):
    """val_tokens is a single chunk of val_seq_tokens, so rank 1 validates nothing; the warm-up's validation
    must not ask it for a batch either."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "train_gpt.py", "--smoke", "--warmup_steps", "1", "--val_tokens", "1024", "--val_seq_tokens", "1024",
               "--batch_tokens", "1024", "--micro_batch_tokens", "512", "--num_iterations", "2"]
    lines, run_id = run_in_copy(tmp_path, command)
    args, table = check_log_format(lines, run_id, world_size=2)
    assert args["val_tokens"] == 1024 and set(table) == {("val", 0), ("train", 1), ("train", 2), ("val", 2)}


def test_compiled_regions_equal_eager_and_stay_under_the_recompile_limit():
    """Windows that grow, batches of different documents, value embeddings and U-net skips present or
    not, the layer without attention and validation's grad mode must not multiply a compiled region's
    variants past the limit that compile_regions sets: past it, dynamo runs them uncompiled, a silent
    slowdown. Every variant must compute what the uncompiled model computes. Inductor's CPU backend
    compiles here: about a minute."""
    torch._dynamo.reset()
    args = tg.parse_args(["--smoke", "--num_layers", "12", "--model_dim", "64", "--head_dim", "32"])
    model = tg.GPT(args, fp8=False)
    randomise_zero_initialised(model)
    eager = copy.deepcopy(model)
    train = tg.synchronous_batches(tg.TrainSource(args.train_files, 0, 1, repeat=True), [tg.BatchShape(1024, 512, 1)] * 4)
    (val,) = next(tg.synchronous_batches(tg.ValSource(args.val_files, 2048, 1024, 0, 1), [tg.BatchShape(1024, 1024, 1)]))
    try:
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=8):
            tg.compile_regions(model)
            for step, (micro,) in enumerate(train):
                window = 128 * (step + 1)
                losses = [m(micro.inputs, micro.targets, micro.seqs, window) for m in (model, eager)]
                for loss in losses:
                    loss.backward()
                assert torch.allclose(*losses, rtol=1e-5)
                for (name, p), q in zip(model.named_parameters(), eager.parameters()):
                    assert rel_error(p.grad, q.grad) < 1e-4, name
                with torch.no_grad():
                    losses = [m(val.inputs, val.targets, val.seqs, window) for m in (model, eager)]
                assert torch.allclose(*losses, rtol=1e-5)
    finally:
        torch._dynamo.reset()


def reference_head_loss(x, w, targets):
    return F.cross_entropy(30 * torch.sigmoid(x.double() @ w.double().T / 7.5), targets.long(), reduction="sum")


def test_head_loss_and_its_gradients_equal_autograd_of_the_formula():
    """The gradient computed in the forward pass, scaled in the backward pass by the loss's own gradient."""
    torch.manual_seed(0)
    x, w = torch.randn(64, 32, dtype=torch.float64), torch.randn(500, 32, dtype=torch.float64)
    targets = torch.randint(0, 500, (64,), dtype=torch.int32)
    x1, w1, x2, w2 = (t.clone().requires_grad_() for t in (x, w, x, w))
    loss = tg.HeadLoss.apply(x1, w1, targets, False)
    ref = reference_head_loss(x2, w2, targets)
    (2.5 * loss).backward()
    (2.5 * ref).backward()
    assert abs(loss.item() - ref.item()) < 1e-5 * ref.item()  # the loss itself is summed in float32
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5) and torch.allclose(w1.grad, w2.grad, atol=1e-5)


@pytest.mark.parametrize("fp8", [False, True])
def test_head_loss_compiles_as_one_graph(fp8):
    """A graph break inside the Function makes dynamo run all of it eagerly: about 20% slower steps."""
    torch._dynamo.reset()
    x = torch.randn(16, 64, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(256, 64, requires_grad=True)
    targets = torch.randint(0, 256, (16,), dtype=torch.int32)
    try:
        torch.compile(tg.HeadLoss.apply, backend="aot_eager", fullgraph=True)(x, w, targets, fp8).backward()
    finally:
        torch._dynamo.reset()
    assert x.grad is not None and w.grad is not None


def test_fp8_head_loss_matches_float_reference_on_cpu():
    """The FP8 head at its fixed scales (CPU _scaled_mm; the full-size check on a GPU is in test_gpu.py)."""
    torch.manual_seed(0)
    x = tg.rms_norm(torch.randn(256, 768)).bfloat16().requires_grad_()
    w = (0.05 * torch.randn(4096, 768)).clamp(-0.8, 0.8).requires_grad_()
    targets = torch.randint(0, 4096, (256,), dtype=torch.int32)
    loss = tg.HeadLoss.apply(x, w, targets, True)
    x2, w2 = (t.detach().double().requires_grad_() for t in (x, w))
    ref = reference_head_loss(x2, w2, targets)
    assert abs(loss.item() - ref.item()) < 0.01 * ref.item()
    loss.backward()
    ref.backward()
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item()  # noqa: E731
    assert x.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.float32
    assert rel(x.grad, x2.grad) < 0.1 and rel(w.grad, w2.grad) < 0.1


@pytest.mark.parametrize("content", [None, b"not a cache", bytes(range(256)) * 16], ids=["none", "text", "binary"])
def test_compile_cache_that_cannot_be_loaded_warns_and_goes_on(content, tmp_path, monkeypatch):
    """A missing artifacts.bin is a first run (no warning); a corrupt one must warn, not crash and not
    pass silently (PyTorch returns None for it rather than raising)."""
    # load_compile_cache sets the cache variables when unset: give it a private environment without them
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.endswith("_CACHE_DIR")})
    if content is not None:
        (tmp_path / "artifacts.bin").write_bytes(content)
    messages = []
    tg.load_compile_cache(tmp_path, messages.append)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path.resolve() / "inductor")
    if content is None:
        assert messages == []
    else:
        assert len(messages) == 1 and messages[0].startswith("warning: compile cache")


def test_train_shape_splits_the_global_batch_and_refuses_one_that_does_not_divide():
    args = tg.Hyperparameters()
    assert [tg.train_shape(args, n).accum_steps for n in (1, 2, 4, 8)] == [8, 4, 2, 1]
    with pytest.raises(tg.UserError, match="--batch_tokens: 393216 is not a multiple of world_size"):
        tg.train_shape(args, 3)
