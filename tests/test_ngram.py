"""The hashed n-gram table (issue 34): the loader's hashes and row lists, the table's lookup and gradient, and
RowAdam's lazy updates against a dense reference."""
import math

import numpy as np
import pytest
import torch

import train_gpt as tg


def expected_ngrams(inputs, table_rows):
    """#92's hashes in Python integers: bigram ((36313 x_t) XOR (27191 x_t-1)) mod (H - 1), trigram
    ((17351 x_t) XOR (60961 x_t-1) XOR (45259 x_t-2)) mod (R - H - 1) + H, H = R // 2; sign patterns
    (x_t XOR x_t-1) and (x_t XOR 3 x_t-1 XOR 7 x_t-2) mod 8192; no token before: the half's last row, pattern 0."""
    x, half = [int(t) for t in inputs], table_rows // 2
    bigrams, trigrams, bigram_signs, trigram_signs = [], [], [], []
    for t in range(len(x)):
        bigrams.append(half - 1 if t < 1 else (36313 * x[t] ^ 27191 * x[t - 1]) % (half - 1))
        bigram_signs.append(0 if t < 1 else (x[t] ^ x[t - 1]) % 8192)
        trigrams.append(table_rows - 1 if t < 2 else
                        (17351 * x[t] ^ 60961 * x[t - 1] ^ 45259 * x[t - 2]) % (table_rows - half - 1) + half)
        trigram_signs.append(0 if t < 2 else (x[t] ^ 3 * x[t - 1] ^ 7 * x[t - 2]) % 8192)
    return [np.array(column) for column in (bigrams, trigrams, bigram_signs, trigram_signs)]


@pytest.mark.parametrize("table_rows", [8192, 13_500_000, 84_602_880])
def test_hash_ngrams_against_the_formula_up_to_the_largest_token_ids(table_rows):
    rng = np.random.default_rng(0)
    inputs = np.concatenate([[50303, 50302, 50303], rng.integers(0, 50304, 2000)]).astype(np.int32)
    out = [np.empty(len(inputs), np.int32) for _ in range(4)]
    tg.hash_ngrams(inputs, table_rows, *out)
    for got, expected in zip(out, expected_ngrams(inputs, table_rows)):
        assert np.array_equal(got, expected)
    bigrams, trigrams = out[:2]
    assert bigrams.max() < table_rows // 2 <= trigrams.min() and trigrams.max() < table_rows


def test_the_step_lists_each_row_once_and_tokens_find_theirs():
    rng = np.random.default_rng(1)
    bigrams, trigrams = rng.integers(0, 50, 300).astype(np.int32), rng.integers(50, 100, 300).astype(np.int32)
    slots_b, slots_t, out = bigrams.copy(), trigrams.copy(), np.empty(600, np.int32)
    (count,) = tg.gather_ngram_rows(slots_b, slots_t, out)
    distinct = np.unique(np.concatenate([bigrams, trigrams]))
    assert count == len(distinct) < 600 and np.array_equal(out[:count], distinct)
    assert np.array_equal(out[slots_b], bigrams) and np.array_equal(out[slots_t], trigrams)
    # for a table sharded over 3 ranks: grouped by the rank that holds them, ascending within each group
    slots_b, slots_t = bigrams.copy(), trigrams.copy()
    owners = tg.gather_ngram_rows(slots_b, slots_t, out, world_size=3)
    assert len(owners) == 3 and sum(owners) == count and min(owners) > 0
    groups = np.split(out[:count], np.cumsum(owners)[:-1])
    assert all((group % 3 == r).all() and (np.diff(group) > 0).all() for r, group in enumerate(groups))
    assert np.array_equal(np.sort(out[:count]), distinct)
    assert np.array_equal(out[slots_b], bigrams) and np.array_equal(out[slots_t], trigrams)


def test_the_loader_hands_out_slots_of_the_steps_rows(make_shards):
    """Through TrainSource: every micro-batch of a step shares the step's rows, and a token's slots lead to its
    hashed rows; the rows of the other rank's micro-batches are not in them. The rows come grouped by the rank
    that holds them in the sharded table, with each group's size."""
    rng = np.random.default_rng(2)
    tokens = np.concatenate([np.concatenate([[tg.BOS], rng.integers(0, 1000, 299)]) for _ in range(40)])
    pattern = make_shards("ngram", [tokens.astype(np.uint16)])
    shape = tg.BatchShape(256, 128, 2)
    for rank in (0, 1):
        source = tg.TrainSource(pattern, rank, 2, repeat=True, ngram_rows=2000)
        (batch,) = list(tg.synchronous_batches(source, [shape]))
        rows = batch[0].ngram_rows
        assert all(m.ngram_rows is rows for m in batch) and len(set(rows.tolist())) == len(rows)
        owners = batch[0].ngram_owners
        assert all(m.ngram_owners == owners for m in batch) and sum(owners) == len(rows)
        assert (rows[: owners[0]] % 2 == 0).all() and (rows[owners[0]:] % 2 == 1).all()
        used = set()
        for m in batch:
            bigrams, trigrams, _, _ = expected_ngrams(m.inputs.numpy(), 2000)
            assert np.array_equal(rows[m.bigram_slots.long()].numpy(), bigrams)
            assert np.array_equal(rows[m.trigram_slots.long()].numpy(), trigrams)
            used |= set(bigrams) | set(trigrams)
        assert set(rows.tolist()) == used


def test_the_loader_tells_the_next_batchs_rows_ahead_unless_the_shape_changes(make_shards):
    """PrefetchLoader.upcoming(shape): the rows and counts of the batch the next send(shape) returns, the very
    tensor it carries (the table fetches it ahead and its forward pass finds it fetched); None where the next
    send has another shape (that batch is rebuilt) and before the first send."""
    rng = np.random.default_rng(3)
    tokens = np.concatenate([np.concatenate([[tg.BOS], rng.integers(0, 1000, 299)]) for _ in range(40)])
    pattern = make_shards("upcoming", [tokens.astype(np.uint16)])
    shape, other = tg.BatchShape(256, 128, 2), tg.BatchShape(128, 128, 2)
    loader = tg.PrefetchLoader(tg.TrainSource(pattern, 0, 1, repeat=True, ngram_rows=2000), torch.device("cpu"))
    assert loader.upcoming(shape) is None
    batch = loader.send(shape)
    for _ in range(3):
        rows, owners, asked, copied = loader.upcoming(shape)
        assert loader.upcoming(other) is None and copied is None  # on a CPU: no copy to wait for
        following = loader.send(shape)
        assert rows is following[0].ngram_rows and owners == following[0].ngram_owners == (len(rows),)
        assert asked is following[0].ngram_asked is None  # one rank: nobody else asks
        assert not torch.equal(rows[:50], batch[0].ngram_rows[:50])  # another batch's rows
        batch = following
    assert loader.upcoming(shape) is not None
    loader.send(other)
    assert loader.upcoming(shape) is None and loader.upcoming(other) is not None


def test_ngram_embedding_is_each_rows_signed_sum_and_its_gradient_lands_on_the_rows_read():
    """The lookup reads the step's rows through the cache: bigram row times its sign pattern plus trigram row
    times its; the cache's gradient, in the step's rows, is the gradient of a dense table's rows."""
    torch.manual_seed(0)
    table_rows, dim, tokens = 64, 8, 40
    ngram = tg.NgramTable(table_rows, dim, capacity=2 * tokens)
    with torch.no_grad():
        ngram.table.normal_()
    inputs = torch.randint(0, 500, (tokens,), dtype=torch.int32)
    fields = [np.empty(tokens, np.int32) for _ in range(4)]
    tg.hash_ngrams(inputs.numpy(), table_rows, *fields)
    rows, slots = np.empty(2 * tokens, np.int32), [f.copy() for f in fields[:2]]
    rows = rows[: sum(tg.gather_ngram_rows(*slots, rows))]
    orders = [np.empty(tokens, np.int32) for _ in range(3)]
    tg.sort_ids([inputs.numpy(), inputs.numpy(), *slots, *fields[2:], *orders], tokens, tokens)
    batch = tg.MicroBatch(inputs, inputs, *(torch.from_numpy(s) for s in slots + fields[2:] + orders),
                          seqs=None, ngram_rows=torch.from_numpy(rows))
    out_grad = torch.randn(tokens, dim)
    (ngram(batch) * out_grad).sum().backward()

    dense = ngram.table.clone().requires_grad_()
    b, t, sb, st = (torch.from_numpy(f).long() for f in fields)
    expected = dense[b] * ngram.signs[sb] + dense[t] * ngram.signs[st]
    (expected * out_grad).sum().backward()
    assert torch.allclose(ngram(batch), expected)
    assert torch.allclose(ngram.cache.grad[: len(rows)], dense.grad[torch.from_numpy(rows).long()])
    assert (ngram.signs.abs() == 1).all() and dense.grad.abs().sum() > 0


class DenseRowAdam:
    """RowAdam's rule applied to the whole table every step, in float64: untouched rows decay (plainly) and their
    second moment with them."""

    def __init__(self, table, lr, wd, beta2, eps=1e-10):
        self.p, self.v = table.double().clone(), torch.zeros(len(table), dtype=torch.float64)
        self.lr, self.wd, self.beta2, self.eps = lr, wd, beta2, eps

    def step(self, grad, factor, step):
        lr = self.lr * factor
        decay = lr * lr * self.wd
        touched = grad.abs().sum(1) > 0
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad.square().mean(1)
        update = grad * lr * (1 - self.beta2 ** (step + 1)) ** 0.5 / (self.v.sqrt() + self.eps)[:, None]
        cautious = (update * self.p > 0) | ~touched[:, None]
        self.p = self.p * (1 - decay * cautious) - update


def test_row_adam_replays_the_steps_a_row_missed_as_a_dense_update_would():
    """Over 12 steps with a scheduled rate, each reading a random fifth of 40 rows (some rows none for several
    steps), the table after RowAdam equals a dense table stepped every step, to float32 rounding."""
    torch.manual_seed(1)
    rows, dim = 40, 6
    ngram = tg.NgramTable(rows, dim, capacity=20)
    with torch.no_grad():
        ngram.table.normal_()
    config = tg.ParamConfig("rows", lr_mul=70.0, wd_mul=5.0, betas=(0.0, 0.95))
    opt = tg.RowAdam(ngram, config, lr=0.002, wd=0.5, steps=12)
    dense = DenseRowAdam(ngram.table[:rows], lr=0.002 * 70, wd=0.5 * 5, beta2=0.95)
    for step in range(12):
        factor = 1 - step / 20
        opt.param_groups[0]["lr"] = 0.002 * factor
        read = torch.randperm(rows)[:8].sort().values
        grad = torch.zeros(20, dim)  # the cache's room; the step's rows take its first 8 places
        grad[:8] = torch.randn(8, dim)
        ngram.cache.grad = grad.clone()
        opt.step(read.int(), step)
        assert not ngram.cache.grad.any()  # the step's gradient consumed: the next step adds into zeros
        dense_grad = torch.zeros(rows, dim, dtype=torch.float64)
        dense_grad[read] = grad[:8].double()
        dense.step(dense_grad, factor, step)
    # rows read at the last step are up to date; the others owe their decay since: bring them up to date
    missed = torch.exp(opt.log_decay[12 - 1] + math.log1p(-(0.002 * (1 - 11 / 20) * 70) ** 2 * 2.5)
                       - opt.log_decay[(opt.last_step[:rows] + 1).long()])
    assert opt.last_step[:rows].min() < 10  # some rows missed several steps
    table = ngram.table[:rows].double() * missed[:, None]
    assert torch.allclose(table, dense.p, rtol=1e-5, atol=1e-6), (table - dense.p).abs().max()
    seen = opt.last_step[:rows] >= 0
    moments = opt.second_moment[:rows].double() * 0.95 ** (11 - opt.last_step[:rows]).double()
    assert torch.allclose(moments[seen], dense.v[seen], rtol=1e-5)
