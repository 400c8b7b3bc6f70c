"""The validation mask (public record #91): train_gpt.impossible_pairs on GPT-2's shipped merge table, checked
against tiktoken's GPT-2 tokenizer built from that table, against real text, and in the head's loss."""
import math
import os
import re
import signal
import time
import types
from pathlib import Path

import numpy as np
import pytest
import tiktoken
import torch
import torch.nn.functional as F

import gpt2_merge_table  # conftest puts data/ on sys.path
import gpt2_prefix_table
import train_gpt as tg

DATA = Path(tg.__file__).parent / "data"
# GPT-2's pre-tokenizer (tiktoken's "gpt2" pattern)
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@pytest.fixture(scope="module")
def gpt2():
    """(the merge table, each token's bytes, tiktoken's GPT-2 tokenizer made from them, the mask and its count).
    The mask is the one a run gets: built by ValidationMask's process, it comes back through a mapped file. That
    process ignores Ctrl-C once it runs its build (the run handles it): a SIGINT sent then must not stop it."""
    merges = tg.load_merge_table(DATA / "gpt2_merges.npy", 50304)
    head = types.SimpleNamespace(never_follows=torch.zeros(50304, 50304 // 8, dtype=torch.uint8))
    mask = tg.ValidationMask(merges, head)
    status = Path(f"/proc/{mask.builder.pid}/status")
    deadline = time.monotonic() + 60
    while not int(re.search(r"^SigIgn:\s*(\w+)", status.read_text(), re.M).group(1), 16) & 1 << signal.SIGINT - 1:
        assert time.monotonic() < deadline, "the mask's process never came to ignore SIGINT"
        time.sleep(0.01)
    os.kill(mask.builder.pid, signal.SIGINT)
    texts = tg.token_texts(merges)
    tokenizer = tiktoken.Encoding("gpt2_from_merges", pat_str=GPT2_PATTERN,
                                  mergeable_ranks={text: t for t, text in enumerate(texts[:50256])},
                                  special_tokens={"<|endoftext|>": 50256})
    pairs, _, _ = mask.apply()
    return merges, texts, tokenizer, head.never_follows.numpy(), pairs


def masked(bits, p, x):
    return (bits[p, x >> 3] >> (x & 7)) & 1 == 1


def test_the_merge_table_is_gpt2s_vocabulary(gpt2):
    """Known GPT-2 encodings, and every token's bytes against the prefix table that encoder.json built (two
    files from two of OpenAI's files: a token whose bytes were wrong would have another longest prefix)."""
    merges, texts, tokenizer, _, _ = gpt2
    assert merges.shape == (50257, 2) and texts[50256] == b""
    assert tokenizer.encode_ordinary("Hello world") == [15496, 995]
    assert tokenizer.encode_ordinary(" the") == [262] and tokenizer.encode_ordinary("hello") == [31373]
    by_text = {text: t for t, text in enumerate(texts)}
    assert len(by_text) == 50257  # all different
    prefixes = np.load(DATA / "gpt2_prefix_tokens.npy")
    assert (gpt2_prefix_table.prefix_table(texts) == prefixes).all()


def test_merge_table_builder_on_a_toy_vocabulary():
    """The builder numbers merged tokens by their merge's line and refuses a merge whose token is elsewhere."""
    encoder = {chr(33 + i): i for i in range(256 - 188)}  # stands in for the one-byte tokens below 256
    with pytest.raises(ValueError, match="merge 0"):
        gpt2_merge_table.merge_table(["! \""], {**encoder, "!\"": 300})


def test_the_mask_is_record_91s_less_its_11_unsafe_pairs(gpt2):
    """#91's rule masks 70,889,701 pairs (2.81 %); this one leaves out the 11 whose previous token ends inside
    a character, which the tokenizer does emit: "˶機" is [135, 114, 49960]."""
    _, _, tokenizer, bits, pairs = gpt2
    assert bits.shape == (50304, 50304 // 8) and bits.dtype == np.uint8
    assert pairs == 70_889_701 - 11 == tg.count_ones(bits)
    assert tokenizer.encode_ordinary("˶機") == [135, 114, 49960] and not masked(bits, 114, 49960)
    assert tokenizer.encode_ordinary("a\u0311士") == [64, 136, 239, 18803] and not masked(bits, 239, 18803)
    assert masked(bits, 220, 1169)  # " " then "the": always " the"
    assert not bits[50256:].any()  # nothing masked after a document's start, nor after padding
    assert not any(masked(bits, np.arange(50304), 50256))  # a document's end is never masked
    assert not bits[[338, 470, 821, 1053, 1101, 1183, 1549]].any()  # after a contraction ('s 't 're 've 'm 'll 'd)


def test_no_pair_of_real_text_is_masked(gpt2):
    """Every pair of consecutive tokens in the sample shards (GPT-2's tokenizer on real English)."""
    bits = gpt2[3]
    for shard in sorted((DATA / "sample").glob("*.bin")):
        tokens = tg.read_shard(shard).numpy().astype(np.int64)
        assert not masked(bits, tokens[:-1], tokens[1:]).any(), shard.name


def test_masked_pairs_never_come_out_of_the_tokenizer_and_emitted_ones_are_never_masked(gpt2):
    """3,000 masked pairs, written between 8 texts on each side: the tokenizer never emits the pair; 3,000 random
    pairs of tokens the tokenizer gives back as they are when their texts are joined: none is masked."""
    _, texts, tokenizer, bits, _ = gpt2
    rng = np.random.default_rng(0)
    contexts = ["", " ", "a", "1", ".", "\n", "é", "文"]
    checked = 0
    chosen = rng.choice(50256, 600, replace=False)
    rows, columns = np.nonzero(np.unpackbits(bits[chosen], axis=1, bitorder="little"))
    for k in rng.choice(len(rows), 3000, replace=False):
        p, x = int(chosen[rows[k]]), int(columns[k])
        for before in contexts:
            for after in contexts:
                try:
                    text = before + (texts[p] + texts[x]).decode("utf-8") + after
                except UnicodeDecodeError:
                    continue
                tokens = tokenizer.encode_ordinary(text)
                assert all((a, b) != (p, x) for a, b in zip(tokens, tokens[1:])), (p, x, text)
                checked += 1
    assert checked > 100_000
    emitted = 0
    for p, x in rng.integers(0, 50256, (3000, 2)):
        try:
            text = (texts[p] + texts[x]).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if tokenizer.encode_ordinary(text) == [p, x]:
            assert not masked(bits, p, x), (p, x)
            emitted += 1
    assert emitted > 1000


def rule_91_pairs(merges):
    """The mask's rule (impossible_pairs' docstring) pair by pair, in plain Python: for each merge R = A + B,
    every p whose last piece is A until a merge after R, followed by every x whose first piece is B until R or
    later, where the seam may lie inside a run (not after a contraction, not between whitespace, not from a symbol
    to a letter, not within a character)."""
    left, right = merges[:, 0].tolist(), merges[:, 1].tolist()
    texts = tg.token_texts(merges)
    classes = [tg.edge_classes(text) if text else "??" for text in texts]
    contraction = [text.decode("utf-8", "replace") in tg.CONTRACTIONS for text in texts]
    lasts, firsts = {}, {}  # piece: [(token, the rank that ends it as the token's edge)]
    for t in range(len(merges)):
        if left[t] < 0:
            continue
        for spine, child, usable in ((lasts, right, classes[t][1] != "?" and not contraction[t]),
                                     (firsts, left, classes[t][0] != "?")):
            piece, ends = t, math.inf
            while usable:
                spine.setdefault(piece, []).append((t, ends))
                if right[piece] < 0:
                    break
                piece, ends = child[piece], piece
    pairs = set()
    for r in range(len(merges)):
        if right[r] < 0:
            continue
        for p, p_ends in lasts.get(left[r], []):
            for x, x_ends in firsts.get(right[r], []):
                seam = classes[p][1] + classes[x][0]
                if p_ends > r and x_ends >= r and seam not in ("SS", "OL"):
                    pairs.add((p, x))
    return pairs


@pytest.mark.parametrize("tokens", [1000, 2400])
def test_the_mask_holds_the_rules_pairs_on_gpt2s_first_merges(tokens):
    """impossible_pairs on GPT-2's first merges against rule_91_pairs: the same pairs."""
    merges = tg.load_merge_table(DATA / "gpt2_merges.npy", 50304)[:tokens]
    bits, count = tg.impossible_pairs(merges, tokens)
    expected = rule_91_pairs(merges)
    assert count == len(expected) > 10_000
    p, x = np.nonzero(np.unpackbits(bits, axis=1, bitorder="little"))
    assert set(zip(p.tolist(), x.tolist())) == expected


def test_masked_validation_loss_leaves_the_masked_tokens_out_of_the_softmax():
    """The head's validation loss with a mask, against float64: the cross-entropy over the tokens not masked
    after each previous token; a mask of zeros changes nothing."""
    torch.manual_seed(0)
    V, T = 64, 40
    head = tg.Head(16, V, fp8=False, prefix_tokens=torch.full((V,), -1, dtype=torch.int32), initial_shares=[],
                   masked=True).double()
    x = torch.randn(T, 16, dtype=torch.float64)
    previous, targets = torch.randint(0, V, (T,)), torch.randint(0, V, (T,))
    never = torch.rand(V, V) < 0.3
    never[previous, targets] = False  # a true target is never masked
    with torch.no_grad():
        unmasked = head(x, [], targets, None, 1, False, previous)
        head.never_follows.copy_(torch.from_numpy(np.packbits(never.numpy(), axis=1, bitorder="little")))
        loss = head(x, [], targets, None, 1, False, previous)
        logits = tg.softcap(tg.rms_norm(x) @ head.weight.T).masked_fill(never[previous], -math.inf)
        assert loss.item() == pytest.approx(F.cross_entropy(logits, targets, reduction="sum").item(), rel=1e-12)
        assert unmasked.item() == pytest.approx(
            F.cross_entropy(tg.softcap(tg.rms_norm(x) @ head.weight.T), targets, reduction="sum").item(), rel=1e-12)
    assert loss < unmasked


def test_the_mask_is_staged_as_soon_as_it_is_built_and_reaches_the_head_only_in_apply():
    """The bits come back from the process into a tensor of their own while the run trains, so that the last
    step does not copy them, and leave the head's zeros alone until apply: a validation before the last must
    mask nothing. The file they came through is deleted once read. (On a GPU: test_gpu.py.)"""
    merges = tg.load_merge_table(DATA / "gpt2_merges.npy", 50304)[:1000]
    head = types.SimpleNamespace(never_follows=torch.zeros(1024, 128, dtype=torch.uint8))
    mask = tg.ValidationMask(merges, head)
    mask.arrived.exception(timeout=120)  # waits for the thread's end
    bits, pairs = tg.impossible_pairs(merges, 1024)
    assert mask.arrived.done() and mask.arrived.exception() is None and not Path(mask.file.name).exists()
    assert torch.equal(mask.staged, torch.from_numpy(bits)) and not head.never_follows.any()
    assert mask.apply()[0] == pairs and torch.equal(head.never_follows, torch.from_numpy(bits))


def test_a_failed_build_fails_the_run_with_the_builders_traceback(capfd):
    """A mask that cannot be built (here, a head with fewer tokens than the merge table) must not reach the
    final validation as zeros: apply raises, and the build's process has printed why."""
    merges = tg.load_merge_table(DATA / "gpt2_merges.npy", 50304)[:1000]
    head = types.SimpleNamespace(never_follows=torch.zeros(800, 100, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="the validation mask's build failed"):
        tg.ValidationMask(merges, head).apply()
    assert "AssertionError" in capfd.readouterr().err and not head.never_follows.any()


@pytest.mark.parametrize("case", ["missing", "float", "a later part", "too many tokens"])
def test_bad_merge_table_is_a_user_error(case, tmp_path):
    path = tmp_path / "merges.npy"
    if case == "float":
        np.save(path, np.zeros((300, 2), np.float32))
    elif case == "a later part":
        np.save(path, np.array([[65, -1], [66, -1], [0, 3], [0, 1]], np.int32))
    elif case == "too many tokens":
        np.save(path, np.full((300, 2), -1, np.int32))
    with pytest.raises(tg.UserError, match="merge table|vocab_size"):
        tg.load_merge_table(path, 256)
