"""train_gpt.py's data path on the CPU: shard files, training and validation batches, the PrefetchLoader."""
import itertools
import traceback

import numpy as np
import pytest
import torch

import train_gpt as tg
from conftest import random_documents, sorting_order
from fineweb import BOS, write_shard

CPU = torch.device("cpu")


# ----------------------------------------------------------------------------------------------------
# Shard files


@pytest.fixture
def good_shard(tmp_path):
    tokens = np.random.default_rng(0).integers(0, 2**16, 500).astype(np.uint16)
    path = tmp_path / "good.bin"
    write_shard(path, tokens)
    return path, tokens


def test_good_shard_round_trips(good_shard):
    path, tokens = good_shard
    assert tg.shard_token_count(path) == 500
    read = tg.read_shard(path)
    assert read.dtype == torch.uint16 and np.array_equal(read.numpy(), tokens)


def rewrite_header(path, index, value):
    header = np.fromfile(path, dtype="<i4", count=256)
    header[index] = value
    path.write_bytes(header.tobytes() + path.read_bytes()[1024:])


def truncate(path, n):
    path.write_bytes(path.read_bytes()[:-n])


CORRUPTIONS = {  # name: (how to damage a 500-token shard, what the error must say)
    "wrong magic": (lambda p: rewrite_header(p, 0, 12345), "wrong magic 12345"),
    "wrong version": (lambda p: rewrite_header(p, 1, 7), "unsupported shard version 7"),
    "truncated by 1": (lambda p: truncate(p, 1), "truncated by 1 bytes"),
    "truncated by 333": (lambda p: truncate(p, 333), "truncated by 333 bytes"),
    "truncated header": (lambda p: p.write_bytes(p.read_bytes()[:1000]), "truncated header"),
    "more tokens in header": (lambda p: rewrite_header(p, 2, 510), "truncated by 20 bytes"),
    "extra bytes": (lambda p: p.write_bytes(p.read_bytes() + b"abc"), "3 bytes beyond"),
    "empty": (lambda p: p.write_bytes(b""), "empty file"),
    "missing": (lambda p: p.unlink(), "no such shard file"),
}


@pytest.mark.parametrize("read", [tg.shard_token_count, tg.read_shard])
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_bad_shard_raises_shard_error_naming_the_file(good_shard, read, corruption):
    path, _ = good_shard
    damage, message = CORRUPTIONS[corruption]
    damage(path)
    with pytest.raises(tg.ShardError, match=message) as excinfo:
        read(path)
    assert str(path) in str(excinfo.value)


def test_shard_paths_sorted_and_no_match_names_the_pattern(make_shards, tmp_path):
    pattern = make_shards("s", [[BOS, 1], [BOS, 2], [BOS, 3]])
    assert [p[-10:] for p in tg.shard_paths(pattern)] == ["000000.bin", "000001.bin", "000002.bin"]
    missing = str(tmp_path / "nothing_*.bin")
    with pytest.raises(tg.UserError, match="nothing_.*no shard files match"):
        tg.shard_paths(missing)


# ----------------------------------------------------------------------------------------------------
# A corpus whose tokens say where they come from, and the batches TrainSource's docstring promises


def traceable_shards(rng, docs_per_shard, max_len=300):
    """Shards of random documents (at least 2 tokens each) whose non-BOS tokens are all distinct."""
    docs = random_documents(rng, sum(docs_per_shard), min_len=2, max_len=max_len)
    flat = np.concatenate(docs)
    flat[flat != BOS] = rng.permutation(BOS)[: np.count_nonzero(flat != BOS)]
    shard_ends = np.cumsum([len(d) for d in docs])[np.cumsum(docs_per_shard) - 1]
    return np.split(flat, shard_ends[:-1])


class Corpus:
    """Where each token of a list of shards sits: its shard, its document and its index in the concatenation."""

    def __init__(self, shards):
        self.flat = np.concatenate(shards)
        self.shard = np.repeat(np.arange(len(shards)), [len(s) for s in shards])
        self.doc = np.cumsum(self.flat == BOS) - 1
        self.index_of = np.full(2**16, -1)
        self.index_of[self.flat[self.flat != BOS]] = np.flatnonzero(self.flat != BOS)

    def positions(self, inputs, targets):
        """Index in the corpus of each input token; a BOS input is found through its target, its document's
        second token."""
        inputs, targets = inputs.numpy().astype(np.int64), targets.numpy().astype(np.int64)
        return np.where(inputs == BOS, self.index_of[targets] - 1, self.index_of[inputs])


def expected_micro_batches(shards, tokens, max_seq_len):
    """Every micro-batch of one pass over `shards`, worked out from the raw tokens: whole documents in
    order (a document's inputs run to just before the next BOS, the shard's last token is no input), the
    one that overflows the micro-batch cut, the rest of it and a shard's too-short tail skipped; documents
    split into attention sequences of at most max_seq_len. Yields (inputs, targets, cu_seqlens)."""
    for shard in shards:
        starts = list(np.flatnonzero(shard == BOS))
        ends = starts[1:] + [len(shard) - 1]
        pieces, room = [], tokens
        for start, end in zip(starts, ends):
            take = min(end - start, room)
            for offset in range(0, take, max_seq_len):
                pieces.append((start + offset, min(max_seq_len, take - offset)))
            room -= take
            if room == 0:
                inputs = np.concatenate([shard[s: s + n] for s, n in pieces])
                targets = np.concatenate([shard[s + 1: s + n + 1] for s, n in pieces])
                yield inputs, targets, np.cumsum([0] + [n for _, n in pieces])
                pieces, room = [], tokens


def global_stream(steps, world_size):
    """Flatten steps of per-rank micro-batches into the global order: micro-batch a of rank r of a step
    is number a * world_size + r of that step."""
    stream = []
    for per_rank in zip(*steps):  # per_rank[r]: rank r's micro-batches of one step
        for a in range(len(per_rank[0])):
            stream.extend(per_rank[r][a] for r in range(world_size))
    return stream


def expected_ngrams(inputs):
    """The n-gram rows and sign patterns of a micro-batch's tokens, in a table of the default size
    (tests/test_ngram.py checks the formula)."""
    from test_ngram import expected_ngrams as formula
    return formula(inputs, tg.Hyperparameters.ngram_rows)


def token_ngrams(m):
    """A micro-batch's n-gram rows (read back through its step's rows) and sign patterns."""
    rows = m.ngram_rows.numpy()
    return [rows[m.bigram_slots.numpy()], rows[m.trigram_slots.numpy()], m.bigram_signs.numpy(),
            m.trigram_signs.numpy()]


def same_batch(got, expected):
    inputs, targets, cu = expected
    return (np.array_equal(got.inputs.numpy(), inputs) and np.array_equal(got.targets.numpy(), targets)
            and all(np.array_equal(a, b) for a, b in zip(token_ngrams(got), expected_ngrams(inputs)))
            and np.array_equal(got.seqs.cu_seqlens.numpy(), cu) and got.seqs.max_len == np.diff(cu).max())


# A tiny shard in the middle, too short to fill a micro-batch: it must be skipped whole.
DOCS_PER_SHARD = [40, 35, 1, 45]
TOKENS, MAX_SEQ_LEN = 256, 64


@pytest.fixture
def train_corpus(make_shards):
    shards = traceable_shards(np.random.default_rng(1), DOCS_PER_SHARD)
    assert len(shards[2]) < TOKENS
    return make_shards("train", shards), shards


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_train_batches_follow_the_documents(train_corpus, world_size):
    pattern, shards = train_corpus
    corpus = Corpus(shards)
    expected = list(expected_micro_batches(shards, TOKENS, MAX_SEQ_LEN))
    steps = len(expected) // 8  # the global batch is 8 micro-batches for every world size
    shape = tg.BatchShape(TOKENS, MAX_SEQ_LEN, 8 // world_size)
    per_rank = [list(tg.synchronous_batches(tg.TrainSource(pattern, r, world_size, repeat=False), [shape] * steps))
                for r in range(world_size)]
    stream = global_stream(per_rank, world_size)
    assert len(stream) == 8 * steps and len(expected) - len(stream) < 8

    for got, want in zip(stream, expected):
        assert same_batch(got, want)
    read = []
    for micro in stream:
        inputs, targets, cu = micro.inputs, micro.targets, micro.seqs.cu_seqlens
        assert inputs[0] == BOS and len(inputs) == len(targets) == TOKENS
        lengths = np.diff(cu.numpy())
        assert cu[0] == 0 and cu[-1] == TOKENS and lengths.min() >= 1 and lengths.max() <= MAX_SEQ_LEN
        assert micro.seqs.max_len == lengths.max()
        where = corpus.positions(inputs, targets)
        assert (where >= 0).all()
        assert np.array_equal(corpus.flat[where + 1], targets.numpy())  # each target follows its input...
        assert np.array_equal(corpus.shard[where + 1], corpus.shard[where])  # ...in the same shard
        for a, b in itertools.pairwise(cu.tolist()):
            assert np.array_equal(where[a:b], np.arange(where[a], where[a] + b - a))  # a contiguous slice
            assert len(set(corpus.doc[where[a:b]])) == 1  # of one document
            assert np.array_equal(targets[a: b - 1], inputs[a + 1: b])
        read.append(where)
    read = np.concatenate(read)
    assert (np.diff(read) > 0).all()  # in shard order, and no token read twice
    assert not np.isin(np.flatnonzero(corpus.shard == 2), read).any()  # the too-short shard is skipped


@pytest.mark.parametrize("high", [50304, 1 << 17, 1 << 31])
def test_stable_order_sorts_ids_stably_in_16_bit_digits(high):
    """numpy's stable argsort, tie for tie, for ids below 2**16 (one digit) and above (two), with many ties."""
    ids = np.random.default_rng(0).integers(0, high, 5000).astype(np.int32)
    ids[::7] = ids[0]
    expected = np.argsort(ids, kind="stable")
    assert len(np.unique(ids)) < len(ids) - 700 and np.array_equal(sorting_order(ids), expected)


def test_micro_batches_carry_the_stable_order_of_their_ids(train_corpus, val_corpus):
    """Every training and validation micro-batch carries the stable sort order of its inputs and of its bigram
    and trigram slots (their places among the step's rows), for RowLookup's backward pass."""
    pattern, _ = train_corpus
    shape = tg.BatchShape(TOKENS, MAX_SEQ_LEN, 4)
    steps = tg.synchronous_batches(tg.TrainSource(pattern, 1, 2, repeat=False), [shape] * 2)
    val = tg.synchronous_batches(tg.ValSource(val_corpus[0], VAL_TOKENS, CHUNK, 0, 1), [tg.BatchShape(CHUNK, CHUNK, 1)])
    micros = [m for step in steps for m in step] + next(val)
    assert len(micros) == 9
    for m in micros:
        for ids, order in ((m.inputs, m.input_order), (m.bigram_slots, m.bigram_order),
                           (m.trigram_slots, m.trigram_order)):
            assert np.array_equal(order.numpy(), np.argsort(ids.numpy(), kind="stable"))


def test_small_example_uses_the_last_token_of_a_shard_only_as_a_target(make_shards):
    docs = [np.arange(n, dtype=np.uint16) for n in (100, 156, 257)]
    for doc in docs:
        doc[0] = BOS
    shard = np.concatenate(docs)
    source = tg.TrainSource(make_shards("small", [shard]), 0, 1, repeat=False)
    (first, second), = tg.synchronous_batches(source, [tg.BatchShape(256, 128, 2)])
    assert first.seqs.cu_seqlens.tolist() == [0, 100, 228, 256] and first.seqs.max_len == 128
    assert np.array_equal(first.targets.numpy(), shard[1:257])
    assert second.seqs.cu_seqlens.tolist() == [0, 128, 256]
    assert np.array_equal(second.inputs.numpy(), shard[256:512])
    assert np.array_equal(second.targets.numpy(), shard[257:513])
    with pytest.raises(tg.EndOfData):
        list(tg.synchronous_batches(source, [tg.BatchShape(256, 128, 3)]))


def test_choose_candidates_holds_every_target_in_order_and_fills_up_with_other_rows():
    rng = np.random.default_rng(0)
    V, P = 50304, 2048
    targets = rng.integers(0, V, 1500).astype(np.int32)
    distinct = np.unique(targets)
    rows = np.full(P, -7, np.int32)
    assert tg.choose_candidates(targets, V, 12345, rows)
    assert np.all(np.diff(rows) > 0) and rows[0] >= 0 and rows[-1] < V  # ascending, so distinct, in range
    assert np.isin(distinct, rows).all()
    again, elsewhere = np.empty(P, np.int32), np.empty(P, np.int32)
    assert tg.choose_candidates(targets, V, 12345, again) and tg.choose_candidates(targets, V, 777, elsewhere)
    assert np.array_equal(rows, again)  # a pure function of the targets and the start
    assert np.isin(distinct, elsewhere).all() and len(np.setdiff1d(elsewhere, rows)) > (P - len(distinct)) // 2
    # the others spread over the vocabulary: a fixed walk, not the rows next to the start
    others = np.setdiff1d(rows, distinct)
    assert np.histogram(others, bins=8, range=(0, V))[0].min() > len(others) / 16
    # as many distinct targets as rows: no room for others; more: no candidates, the buffer left alone
    exact = np.empty(len(distinct), np.int32)
    assert tg.choose_candidates(targets, V, 0, exact) and np.array_equal(exact, distinct)
    small = np.full(len(distinct) - 1, -7, np.int32)
    assert not tg.choose_candidates(targets, V, 0, small) and (small == -7).all()


@pytest.mark.parametrize("world_size", [1, 2])
def test_micro_batches_carry_candidates_that_hold_their_targets_on_any_world_size(train_corpus, world_size):
    """Each micro-batch's sampled-softmax rows depend on the micro-batch alone (its place in the corpus), not on
    the rank or world size that trains it; a micro-batch with more distinct targets than rows gets none (the
    whole vocabulary)."""
    pattern, _ = train_corpus

    def stream(shape, world_size):
        per_rank = [list(tg.synchronous_batches(tg.TrainSource(pattern, r, world_size, repeat=False),
                                                [shape] * 3)) for r in range(world_size)]
        return global_stream(per_rank, world_size)

    shape = tg.BatchShape(TOKENS, MAX_SEQ_LEN, 8 // world_size, candidates=512)
    got = stream(shape, world_size)
    assert len(got) == 24
    for micro in got:
        rows = micro.candidates.numpy()
        assert len(rows) == 512 and np.all(np.diff(rows) > 0) and np.isin(micro.targets.numpy(), rows).all()
    alone = stream(tg.BatchShape(TOKENS, MAX_SEQ_LEN, 8, candidates=512), 1)
    assert all(np.array_equal(a.candidates, b.candidates) for a, b in zip(got, alone))
    too_few = stream(tg.BatchShape(TOKENS, MAX_SEQ_LEN, 8 // world_size, candidates=128), world_size)
    assert all(micro.candidates is None for micro in too_few)  # 256 random targets: more than 128 distinct
    assert all(micro.candidates is None for micro in stream(tg.BatchShape(TOKENS, MAX_SEQ_LEN, 8 // world_size),
                                                            world_size))


# ----------------------------------------------------------------------------------------------------
# PrefetchLoader


def as_arrays(batches):
    none = np.array([-1])  # no candidates: the whole vocabulary
    return [([getattr(m, f).numpy() for f in tg.TOKEN_FIELDS] + [m.ngram_rows.numpy(), m.seqs.cu_seqlens.numpy()]
             + [none if m.candidates is None else m.candidates.numpy()], m.seqs.max_len) for m in batches]


def assert_same_steps(got, expected):
    assert len(got) == len(expected)
    for got_step, expected_step in zip(got, expected):
        assert len(got_step) == len(expected_step)
        for (g, g_max), (e, e_max) in zip(as_arrays(got_step), as_arrays(expected_step)):
            assert all(np.array_equal(x, y) for x, y in zip(g, e)) and g_max == e_max


@pytest.mark.parametrize("world_size, rank", [(1, 0), (2, 1), (8, 5)])
def test_prefetch_loader_equals_synchronous_batches(make_shards, world_size, rank):
    rng = np.random.default_rng(2)
    pattern = make_shards("train", [np.concatenate(random_documents(rng, 15)) for _ in range(5)])
    shapes = [tg.BatchShape(256, 64, 8 // world_size)] * 40 + [tg.BatchShape(128, 100, 16 // world_size)] * 40
    loader = tg.PrefetchLoader(tg.TrainSource(pattern, rank, world_size, repeat=True), CPU)
    got = [loader.send(shape) for shape in shapes]  # every batch held until the end
    expected = list(tg.synchronous_batches(tg.TrainSource(pattern, rank, world_size, repeat=True), shapes))
    assert_same_steps(got, expected)


@pytest.mark.parametrize("world_size, rank", [(1, 0), (2, 1), (8, 5)])
def test_prefetch_loader_through_every_stage_change_equals_synchronous_batches(make_shards, world_size, rank):
    """A run's shapes, step by step through TRAINING_STAGES: micro-batches grow at each stage change and the
    loader rebuilds what it had prefetched at the old shape."""
    rng = np.random.default_rng(4)
    pattern = make_shards("train", [np.concatenate(random_documents(rng, 40, max_len=900)) for _ in range(4)])
    args = tg.parse_args(["--batch_tokens", "3072", "--micro_batch_tokens", "384", "--scheduled_steps", "12",
                          "--extension_steps", "3"])
    shapes = [tg.train_shape(args, world_size, tg.TRAINING_STAGES[tg.stage_index(step, args)])
              for step in range(tg.total_steps(args))]
    assert len({s.tokens for s in shapes}) == 3 and len({s.max_seq_len for s in shapes}) == 2
    loader = tg.PrefetchLoader(tg.TrainSource(pattern, rank, world_size, repeat=True), CPU)
    got = [loader.send(shape) for shape in shapes]
    expected = list(tg.synchronous_batches(tg.TrainSource(pattern, rank, world_size, repeat=True), shapes))
    assert_same_steps(got, expected)


def test_prefetch_loader_restart_rewinds(make_shards):
    rng = np.random.default_rng(3)
    pattern = make_shards("train", [np.concatenate(random_documents(rng, 20)) for _ in range(2)])
    source = tg.TrainSource(pattern, 0, 2, repeat=True)
    loader, shape = tg.PrefetchLoader(source, CPU), tg.BatchShape(128, 64, 2)
    first = [loader.send(shape) for _ in range(5)]
    loader.restart(source.start)
    assert_same_steps([loader.send(shape) for _ in range(5)], first)


def test_end_of_data_only_when_a_batch_needs_missing_data(train_corpus):
    pattern, shards = train_corpus
    expected = list(expected_micro_batches(shards, TOKENS, MAX_SEQ_LEN))
    full_steps = len(expected) // 4  # 2 ranks, 2 micro-batches each
    loader = tg.PrefetchLoader(tg.TrainSource(pattern, 1, 2, repeat=False), CPU)
    shape = tg.BatchShape(TOKENS, MAX_SEQ_LEN, 2)
    for step in range(full_steps):
        a0, a1 = loader.send(shape)
        assert same_batch(a0, expected[4 * step + 1]) and same_batch(a1, expected[4 * step + 3])
    with pytest.raises(tg.EndOfData, match="repeat_train_files"):
        loader.send(shape)


def test_repeat_wraps_around(train_corpus):
    pattern, shards = train_corpus
    expected = list(expected_micro_batches(shards + shards, TOKENS, MAX_SEQ_LEN))
    loader = tg.PrefetchLoader(tg.TrainSource(pattern, 0, 1, repeat=True), CPU)
    shape = tg.BatchShape(TOKENS, MAX_SEQ_LEN, 3)
    steps = len(expected) // 3
    assert 3 * steps > len(expected) // 2  # the last steps are in the second pass
    got = [micro for _ in range(steps) for micro in loader.send(shape)]
    assert all(same_batch(g, e) for g, e in zip(got, expected))


class InjectedError(Exception):
    pass


def fail_in_the_worker():
    raise InjectedError("the fifth build")


def test_worker_exception_reaches_send_with_its_traceback(make_shards, monkeypatch):
    rng = np.random.default_rng(4)
    pattern = make_shards("train", [np.concatenate(random_documents(rng, 30))])
    source = tg.TrainSource(pattern, 0, 1, repeat=True)
    builds, build = [], source.build

    def failing_build(cursor, shape, buffers):
        builds.append(cursor)
        if len(builds) == 5:
            fail_in_the_worker()
        return build(cursor, shape, buffers)

    monkeypatch.setattr(source, "build", failing_build)
    loader, shape = tg.PrefetchLoader(source, CPU), tg.BatchShape(128, 64, 1)
    for _ in range(4):
        loader.send(shape)
    with pytest.raises(InjectedError, match="fifth build") as excinfo:
        loader.send(shape)
    assert "fail_in_the_worker" in [frame.name for frame in traceback.extract_tb(excinfo.tb)]


# ----------------------------------------------------------------------------------------------------
# ValSource

CHUNK, VAL_TOKENS = 512, 6 * 512


@pytest.fixture
def val_corpus(make_shards):
    rng = np.random.default_rng(5)
    shards = [np.concatenate(random_documents(rng, n)) for n in (12, 15)]
    assert len(shards[0]) < VAL_TOKENS < len(shards[0]) + len(shards[1])  # validation crosses a shard boundary
    return make_shards("val", shards), np.concatenate(shards)


def validation_chunks(pattern, world_size, rounds=1):
    """The chunks every rank gets through a PrefetchLoader, in chunk order (chunk c is rank c % world_size's
    number c // world_size), once per round of validation."""
    shape = tg.BatchShape(CHUNK, CHUNK, 1)
    per_rank = []
    for rank in range(world_size):
        source = tg.ValSource(pattern, VAL_TOKENS, CHUNK, rank, world_size)
        loader = tg.PrefetchLoader(source, CPU)
        per_rank.append([[loader.send(shape)[0] for _ in range(source.batches_for_rank(rank))]
                         for _ in range(rounds)])
    assert sum(len(batches[0]) for batches in per_rank) == VAL_TOKENS // CHUNK
    return [[per_rank[c % world_size][k][c // world_size] for c in range(VAL_TOKENS // CHUNK)]
            for k in range(rounds)]


@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
def test_validation_reads_the_first_val_tokens_for_any_world_size(val_corpus, world_size):
    pattern, tokens = val_corpus
    first, second = validation_chunks(pattern, world_size, rounds=2)
    assert np.array_equal(np.concatenate([m.inputs.numpy() for m in first]), tokens[:VAL_TOKENS])
    assert np.array_equal(np.concatenate([m.targets.numpy() for m in first]), tokens[1: VAL_TOKENS + 1])
    for m in first:
        starts = np.union1d([0], np.flatnonzero(m.inputs.numpy() == BOS))  # sequences start at documents
        assert np.array_equal(m.seqs.cu_seqlens.numpy(), np.append(starts, CHUNK))
        # each chunk's first tokens are hashed as having none before them
        assert all(np.array_equal(a, b) for a, b in zip(token_ngrams(m), expected_ngrams(m.inputs.numpy())))
    for a, b in zip(first, second):  # the next validation reads the same chunks again
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.seqs.cu_seqlens, b.seqs.cu_seqlens)


def test_val_tokens_must_be_a_multiple_of_the_chunk(val_corpus):
    pattern, _ = val_corpus
    with pytest.raises(tg.UserError, match="--val_tokens: 3073 is not a multiple of --val_seq_tokens 512"):
        tg.ValSource(pattern, VAL_TOKENS + 1, CHUNK, 0, 1)


def test_validation_needs_one_token_more_than_val_tokens(make_shards):
    tokens = np.concatenate(random_documents(np.random.default_rng(6), 10, min_len=150))[:1025]
    with pytest.raises(tg.UserError, match="short_.*: validation needs 1025 tokens"):
        tg.ValSource(make_shards("short", [tokens[:1024]]), 1024, 512, 0, 1)
    source = tg.ValSource(make_shards("enough", [tokens[:1000], tokens[1000:]]), 1024, 512, 0, 1)
    _, (last,) = tg.synchronous_batches(source, [tg.BatchShape(512, 512, 1)] * 2)
    assert np.array_equal(last.targets.numpy(), tokens[513:1025])


def test_shards_too_short_for_a_micro_batch_raise_instead_of_looping(make_shards):
    pattern = make_shards("short", [np.array([tg.BOS, 1, 2, 3], dtype=np.uint16)] * 2)
    source = tg.TrainSource(pattern, 0, 1, repeat=True)
    with pytest.raises(tg.UserError, match="short_.*: no train shard holds a micro-batch of 64 tokens"):
        source._micro_batch((0, 0), tg.BatchShape(64, 64, 1))
