"""Build FineWeb-format token shards from raw text.

    python data/fineweb.py --input a.jsonl b.txt --out_dir data/mycorpus [--shard_tokens N] [--val_tokens N]

A .txt file is one document; a .jsonl file holds one document per line, in its "text" field. Documents are
tokenised with tiktoken's GPT-2 encoding (pip install tiktoken). The first val_tokens tokens (whole documents)
go to <prefix>_val_000000.bin, the rest to <prefix>_train_000001.bin, ... of at most shard_tokens each, as in
the public FineWeb shards; a document is never split across shards.

A shard is a 256-int32 little-endian header (magic 20240520, version 1, token count) followed by the
tokens as little-endian uint16 GPT-2 ids; every document starts with the end-of-text token 50256.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

SHARD_MAGIC, SHARD_VERSION, HEADER_INTS, BOS = 20240520, 1, 256, 50256


def write_shard(path, tokens):
    """Write `tokens` (any integer array of GPT-2 ids) as one shard, atomically."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**16):
        raise ValueError(f"{path}: token ids must fit in uint16")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = SHARD_MAGIC, SHARD_VERSION, len(tokens)
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
    partial.replace(path)


def pack_shards(documents, shard_tokens, val_tokens):
    """Group documents (sequences of token ids, without BOS) into shards of whole documents, each document
    led by BOS. Yields ("val", tokens) for the first val_tokens tokens' worth, then ("train", tokens) shards."""
    split, limit, shard, size = "val", val_tokens, [], 0
    for number, doc in enumerate(documents, 1):
        doc = np.insert(np.asarray(doc, dtype=np.int32), 0, BOS)
        if (doc[1:] == BOS).any():  # training reads every BOS as the start of a document
            raise ValueError(f"document {number} contains the BOS token {BOS} itself")
        if shard and size + len(doc) > limit:
            yield split, np.concatenate(shard)
            split, limit, shard, size = "train", shard_tokens, [], 0
        if len(doc) > limit:
            raise ValueError(f"document {number} ({len(doc)} tokens with BOS) does not fit in a {split} shard "
                             f"of {limit} tokens")
        shard.append(doc)
        size += len(doc)
    if shard:
        yield split, np.concatenate(shard)


def write_shards(documents, out_dir, prefix, shard_tokens, val_tokens):
    """pack_shards into out_dir/<prefix>_val_000000.bin, <prefix>_train_000001.bin, ...; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    old = sorted(out_dir.glob(f"{prefix}_*.bin"))
    if old:  # a longer earlier build would leave train shards that training globs in with the new ones
        raise FileExistsError(f"{out_dir} already holds {old[0].name} and {len(old) - 1} more; remove them first")
    paths = []
    for i, (split, tokens) in enumerate(pack_shards(documents, shard_tokens, val_tokens)):
        paths.append(out_dir / f"{prefix}_{split}_{i:06d}.bin")
        write_shard(paths[-1], tokens)
        print(f"{paths[-1]}: {len(tokens):,} tokens")
    return paths


def read_documents(paths):
    """The texts of the input files: a whole .txt file, or the "text" of each line of a .jsonl file."""
    for path in map(Path, paths):
        if path.suffix not in (".txt", ".jsonl"):
            raise ValueError(f"{path}: expected a .txt or .jsonl file")
        try:
            if path.suffix == ".txt":
                yield path.read_text(encoding="utf-8")
            else:
                yield from read_jsonl(path)
        except ValueError as e:  # bad JSON or UTF-8: say in which file
            raise ValueError(f"{path}: {e}") from None


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise ValueError(f"line {line_number}: not JSON ({e})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f'line {line_number}: no string "text" field')
            yield record["text"]


def tokenize(texts):
    """GPT-2 token ids of each non-empty text."""
    try:
        import tiktoken  # only building shards from text needs it
    except ImportError:
        raise SystemExit("tokenising text needs tiktoken: pip install tiktoken") from None
    encoding = tiktoken.get_encoding("gpt2")
    for text in texts:
        if text:  # an empty document would be a lone BOS, nothing to learn from
            # encode_ordinary: "<|endoftext|>" inside a text stays text, so BOS only ever starts a document
            yield encoding.encode_ordinary(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", nargs="+", required=True, help=".txt or .jsonl files")
    parser.add_argument("--out_dir", type=Path, required=True)
    parser.add_argument("--prefix", help="shard name prefix (default: the name of out_dir)")
    parser.add_argument("--shard_tokens", type=int, default=100_000_000)
    parser.add_argument("--val_tokens", type=int, default=100_000_000)
    args = parser.parse_args(argv)
    if args.shard_tokens < 1 or args.val_tokens < 1:
        parser.error("--shard_tokens and --val_tokens must be positive")
    prefix = args.prefix or args.out_dir.resolve().name
    try:
        paths = write_shards(tokenize(read_documents(args.input)), args.out_dir, prefix, args.shard_tokens,
                             args.val_tokens)
    except (ValueError, OSError) as e:
        raise SystemExit(f"error: {e}") from None
    if len(paths) < 2:
        raise SystemExit("error: no train shard: the input does not fill more than the val shard; lower --val_tokens")


if __name__ == "__main__":
    main()
