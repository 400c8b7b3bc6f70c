"""TailAverage (record #92's end-of-run weight averaging) on the smoke model, on the CPU: the moving average
against a float64 reference, the blend and its renormalisation, the tied embedding, tail_blend 0, which
parameters are averaged (PARAMETER_TABLE's `averaged` column), and the flags' range checks."""
import re

import pytest
import torch

import train_gpt as tg

SMOKE = tg.parse_args(["--smoke"])


@pytest.fixture(scope="module")
def model():
    """One smoke model for the whole file: every test sets the values it needs."""
    return tg.GPT(SMOKE, fp8=False)


def perturb(params, generator, whole=True):
    """Add fresh noise to each parameter: elementwise, or (whole=False, cheaper where any change will do) one
    random number to all of its entries."""
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape if whole else (), generator=generator))


def test_moving_average_matches_a_float64_reference(model):
    """The averages follow the tail only: nothing before first_step, a copy at first_step, then an
    exponential moving average of rate 2 / (tail steps + 1). A wrong rate, a wrong start or an average that
    drifts from the values it is fed (rounding, a missed step) would all change the final weights."""
    N = tg.total_steps(SMOKE)
    tail_steps = round(SMOKE.tail_frac * N)
    tail = tg.TailAverage(model, SMOKE)
    assert (N, tail_steps) == (26, 6)  # the smoke settings: 24 + 2 steps, round(6.5) == 6
    assert tail.first_step == N - tail_steps == 20 and tail.rate == pytest.approx(2 / 7, rel=1e-15)
    generator = torch.Generator().manual_seed(0)
    reference = None
    for step in range(N):
        perturb(tail.params, generator, whole=step >= N - tail_steps)
        tail.update(step)
        if step < N - tail_steps:
            assert tail.averages is None, step
            continue
        values = [p.detach().double() for p in tail.params]
        if reference is None:
            reference = [v.clone() for v in values]
        else:
            reference = [r + 2 / (tail_steps + 1) * (v - r) for r, v in zip(reference, values)]
    assert len(tail.averages) == len(reference) == len(tail.params)
    for average, expected, p in zip(tail.averages, reference, tail.params):
        assert average.dtype == torch.float32 and average.data_ptr() != p.data_ptr()
        torch.testing.assert_close(average.double(), expected, rtol=1e-5, atol=1e-5)
        # the last values differ from the average by about the noise (1 an entry): the comparison means something
        assert (average - p).norm() > 0.5 * p.numel() ** 0.5


def test_apply_blends_towards_the_average_and_keeps_each_norm(model):
    """apply() moves each averaged parameter tail_blend of the way to its average, then rescales it to its own
    Frobenius norm (the blend of matrices pointing different ways is shorter); every other parameter (value
    embeddings, scalars, gates, the n-gram cache) keeps its bits."""
    tail = tg.TailAverage(model, SMOKE)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
        tail.update(tail.first_step)  # the average: a copy of these values
        for p in model.parameters():  # raw values of the average's norm, orthogonal to it
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64)
            if p.dim():
                noise -= (noise * p).sum() / (p.double() * p).sum() * p
            p.copy_(noise * p.double().norm() / noise.norm())
    raw = {name: p.detach().clone() for name, p in model.named_parameters()}
    averages = {id(p): a.double() for p, a in zip(tail.params, tail.averages)}
    tail.apply()
    averaged_names = set()
    for name, p in model.named_parameters():
        if id(p) not in averages:
            assert torch.equal(p, raw[name]), name
            continue
        averaged_names.add(name)
        r = raw[name].double()
        blend = r + SMOKE.tail_blend * (averages[id(p)] - r)
        expected = blend * (r.norm() / blend.norm())
        # float32 norms of the 50304 x 64 tables are off by ~6e-5 on the CPU, hence 3e-4; unrenormalised: 0.26
        torch.testing.assert_close(p.detach().double(), expected, rtol=3e-4, atol=1e-6)
        assert p.detach().double().norm().item() == pytest.approx(r.norm().item(), rel=3e-4), name
        assert blend.norm() < 0.9 * r.norm(), name  # the renormalisation really had something to do
    assert {"head.weight", "embed.weight", "blocks.0.attn.qkv"} <= averaged_names
    assert not any(n.startswith("value_embeds.") or n == "ngram.cache" for n in averaged_names)


def test_tied_embedding_averages_the_heads_values(model):
    """While the embedding is tied to the head the forward pass reads the head's weight, so the embedding's
    average must follow the head's values, not its own stale ones, which apply() would pull it towards."""
    args = tg.parse_args(["--smoke", "--untie_frac", "1"])  # tied through step 25: the whole tail
    tail = tg.TailAverage(model, args)
    assert tail.first_step <= tg.untie_step(args) - 3
    generator = torch.Generator().manual_seed(2)
    (embed_at,) = [i for i, p in enumerate(tail.params) if p is model.embed.weight]
    (head_at,) = [i for i, p in enumerate(tail.params) if p is model.head.weight]
    for step in range(tail.first_step, tail.first_step + 3):
        perturb(model.parameters(), generator)
        assert not torch.equal(model.embed.weight, model.head.weight)
        tail.update(step)
        if step == tail.first_step:
            assert torch.equal(tail.averages[embed_at], model.head.weight)
        assert torch.equal(tail.averages[embed_at], tail.averages[head_at]), step
        assert not torch.equal(tail.averages[embed_at], model.embed.weight), step


def test_tail_blend_zero_changes_nothing(model):
    """--tail_blend 0 switches the averaging off: no averages kept (no memory, no time) and apply() leaves every
    parameter's bits as they are."""
    args = tg.parse_args(["--smoke", "--tail_blend", "0"])
    tail = tg.TailAverage(model, args)
    generator = torch.Generator().manual_seed(3)
    for step in range(tg.total_steps(args)):
        perturb(model.parameters(), generator, whole=False)
        tail.update(step)
    assert tail.averages is None
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    tail.apply()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_averaged_parameters_are_the_normuon_matrices_head_and_embedding(model):
    """The averaged parameters are the NorMuon matrices, the head and the embedding (which the head becomes at
    the untie); the value embeddings, the n-gram cache and the small Adam parameters stay as trained. TailAverage
    takes its list from PARAMETER_TABLE's `averaged` column, so a row changed there shows here."""
    tail = tg.TailAverage(model, SMOKE)
    named = dict(model.named_parameters())
    normuon = {n for n in named if tg.param_config(n).optimizer == "normuon"}
    assert len(normuon) >= 10
    expected = normuon | {"head.weight", "embed.weight"}
    assert {n for n in named if tg.param_config(n).averaged} == expected
    assert [id(p) for p in tail.params] == [id(p) for n, p in named.items() if n in expected]
    assert not any(tg.param_config(n).averaged for n in named if n.startswith("value_embeds."))
    assert not tg.param_config("ngram.cache").averaged and not tg.param_config("smear_gate.weight").averaged


@pytest.mark.parametrize("argv, message", [
    (["--smoke", "--tail_frac", "1.5"], "--tail_frac: 1.5 is not a fraction between 0 and 1"),
    (["--smoke", "--tail_blend", "-0.1"], "--tail_blend: -0.1 is not a fraction between 0 and 1"),
])
def test_tail_flags_outside_zero_one_are_refused_naming_the_flag(argv, message):
    """A tail longer than the run, or a blend beyond either end, has no meaning: check_hyperparameters refuses
    it before anything starts, naming the flag."""
    with pytest.raises(tg.UserError, match="^" + re.escape(message)):
        tg.parse_args(argv)
