"""data/fineweb.py: writing shards, packing documents into val/train shards, reading and tokenising text."""
import json
import sys
import types

import numpy as np
import pytest

import fineweb
import train_gpt
from fineweb import BOS, pack_shards, read_documents, write_shard, write_shards


def read_tokens(path):
    """A shard's tokens, read the way training reads them (which also checks header and size)."""
    return train_gpt.read_shard(path).numpy().astype(np.int64)


def split_documents(tokens):
    starts = list(np.flatnonzero(tokens == BOS)) + [len(tokens)]
    return [tokens[a:b] for a, b in zip(starts, starts[1:])]


def test_write_shard_round_trips(tmp_path):
    tokens = np.random.default_rng(0).integers(0, 2**16, 1000)
    write_shard(tmp_path / "a.bin", tokens)
    assert train_gpt.shard_token_count(tmp_path / "a.bin") == 1000
    header = np.fromfile(tmp_path / "a.bin", dtype="<i4", count=fineweb.HEADER_INTS)
    assert list(header[:3]) == [fineweb.SHARD_MAGIC, fineweb.SHARD_VERSION, 1000] and not header[3:].any()
    assert np.array_equal(read_tokens(tmp_path / "a.bin"), tokens)
    assert not list(tmp_path.glob("*.partial"))


def test_write_shard_rejects_ids_beyond_uint16(tmp_path):
    with pytest.raises(ValueError, match="uint16"):
        write_shard(tmp_path / "a.bin", [1, 2**16])
    assert not (tmp_path / "a.bin").exists()


def test_pack_shards_small_example():
    docs = [[1, 2], [3], [4, 5, 6], [7]]
    shards = [(split, list(tokens)) for split, tokens in pack_shards(docs, shard_tokens=4, val_tokens=3)]
    assert shards == [
        ("val", [BOS, 1, 2]),  # exactly full
        ("train", [BOS, 3]),  # [BOS, 4, 5, 6] would make 6 > 4 tokens: it starts the next shard
        ("train", [BOS, 4, 5, 6]),
        ("train", [BOS, 7]),
    ]


def test_write_shards_keeps_documents_whole_and_in_order(tmp_path):
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, BOS, rng.integers(0, 120)) for _ in range(300)]
    shard_tokens, val_tokens = 1000, 2500
    paths = write_shards(docs, tmp_path, "toy", shard_tokens, val_tokens)

    assert [p.name for p in paths] == ["toy_val_000000.bin"] + [f"toy_train_{i:06d}.bin" for i in range(1, len(paths))]
    assert sorted(tmp_path.iterdir()) == sorted(paths)
    shards = [read_tokens(p) for p in paths]
    expected = [np.concatenate([[BOS], doc]) for doc in docs]
    # the token stream is preserved, and each shard splits into whole documents at its BOS tokens
    assert np.array_equal(np.concatenate(shards), np.concatenate(expected))
    per_shard = [split_documents(s) for s in shards]
    assert all(s[0] == BOS for s in shards)
    assert [len(d) for docs_in_shard in per_shard for d in docs_in_shard] == [len(d) for d in expected]
    # shards respect their limits, and each is cut only where its next document would not fit
    limits = [val_tokens] + [shard_tokens] * (len(shards) - 1)
    assert all(len(s) <= limit for s, limit in zip(shards, limits))
    assert all(len(s) + len(nxt[0]) > limit for s, nxt, limit in zip(shards, per_shard[1:], limits))
    assert len(shards) > 3


def test_pack_shards_rejects_a_document_too_long_for_a_shard():
    with pytest.raises(ValueError, match="document 2 .5 tokens with BOS. does not fit in a train shard of 4"):
        list(pack_shards([[1, 2], [1, 2, 3, 4]], shard_tokens=4, val_tokens=3))


def test_pack_shards_rejects_bos_inside_a_document():
    with pytest.raises(ValueError, match="document 1 contains the BOS token"):
        list(pack_shards([[1, BOS, 2]], shard_tokens=10, val_tokens=10))


def test_write_shards_refuses_to_mix_with_old_shards(tmp_path):
    write_shards([[1, 2]] * 4, tmp_path, "toy", shard_tokens=3, val_tokens=3)
    with pytest.raises(FileExistsError, match="toy_train_000001.bin and 3 more"):
        write_shards([[1, 2]], tmp_path, "toy", shard_tokens=3, val_tokens=3)


def test_read_documents(tmp_path):
    (tmp_path / "a.txt").write_text("first paragraph\n\nsecond paragraph of the same document\n")
    lines = [json.dumps({"text": "one", "id": 1}), "", json.dumps({"text": "two"})]  # blank lines are skipped
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    texts = list(read_documents([tmp_path / "a.txt", tmp_path / "b.jsonl"]))
    assert texts == ["first paragraph\n\nsecond paragraph of the same document\n", "one", "two"]


@pytest.mark.parametrize("name, content, problem", [
    ("c.jsonl", '{"text": "ok"}\n{"body": "x"}\n', r'c.jsonl: line 2: no string "text" field'),
    ("c.jsonl", '{"text": "ok"}\nnot json\n', r"c.jsonl: line 2: not JSON"),
    ("c.txt", b"\xff\xfe", r"c.txt: 'utf-8' codec can't decode"),
    ("c.csv", "text\n", r"c.csv: expected a .txt or .jsonl file"),
])
def test_read_documents_names_bad_input(tmp_path, name, content, problem):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=problem):
        list(read_documents([path]))


@pytest.fixture
def fake_tiktoken(monkeypatch):
    """Stands in for tiktoken (an optional dependency that also downloads its vocabulary): one id per byte."""
    encoding = types.SimpleNamespace(encode_ordinary=lambda text: list(text.encode()))
    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=lambda name: encoding))


def test_main_builds_shards_from_text(tmp_path, fake_tiktoken):
    texts = [f"document number {i} " * (i % 5 + 1) for i in range(40)]
    (tmp_path / "a.txt").write_text(texts[0])
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[1:] + [""]))
    out = tmp_path / "corpus"
    fineweb.main(["--input", str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl"), "--out_dir", str(out),
                  "--shard_tokens", "400", "--val_tokens", "300"])
    trains = sorted(out.glob("corpus_train_*.bin"))
    assert sorted(out.iterdir()) == sorted(trains + [out / "corpus_val_000000.bin"]) and len(trains) > 1
    stream = np.concatenate([read_tokens(p) for p in [out / "corpus_val_000000.bin"] + trains])
    # the empty last text is skipped, not written as a lone BOS
    assert np.array_equal(stream, np.concatenate([[BOS, *t.encode()] for t in texts]))


def test_main_without_a_train_shard_fails(tmp_path, fake_tiktoken):
    (tmp_path / "a.txt").write_text("short")
    with pytest.raises(SystemExit, match="no train shard"):
        fineweb.main(["--input", str(tmp_path / "a.txt"), "--out_dir", str(tmp_path / "out")])


def test_main_without_tiktoken_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # makes `import tiktoken` fail
    (tmp_path / "a.txt").write_text("text")
    with pytest.raises(SystemExit, match="pip install tiktoken"):
        fineweb.main(["--input", str(tmp_path / "a.txt"), "--out_dir", str(tmp_path / "out")])
