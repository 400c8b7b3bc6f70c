"""The prefix-token loss's table: data/gpt2_prefix_table.py, the table it built (shipped in data/) and its
loading in train_gpt.py."""
from pathlib import Path

import numpy as np
import pytest

import gpt2_prefix_table  # conftest puts data/ on sys.path
import train_gpt as tg


def test_prefix_table_maps_tokens_to_their_longest_prefix_token():
    """The shipped table on tokens checked by hand against GPT-2's vocabulary (the byte strings in the
    comments), padded to the model's vocabulary."""
    table = tg.load_prefix_table(Path(tg.__file__).parent / "data" / "gpt2_prefix_tokens.npy", 50304).numpy()
    assert table.dtype == np.int32 and table.shape == (50304,)
    assert table[262] == 294  # " the" -> " th"
    assert table[290] == 281  # " and" -> " an"
    assert table[1169] == 400  # "the" -> "th"
    assert table[4881] == 4682  # " France" -> " Franc"
    assert table[31373] == 12758  # "hello" -> "hell"
    assert table[50255] == 17841  # " gazed" -> " gaze"
    assert (table[:256] == -1).all()  # the one-byte tokens
    assert (table[50256:] == -1).all()  # <|endoftext|> and the padding
    assert (table[256:50256] >= 0).all()  # every merged token has at least its first byte


def test_prefix_table_builder_on_a_toy_vocabulary():
    assert gpt2_prefix_table.prefix_table([b"a", b"b", b"ab", b"abb", b"ba", b"", b"bab"]).tolist() == [
        -1, -1, 0, 2, 1, -1, 4]
    decode = gpt2_prefix_table.byte_of_char()
    assert sorted(decode.values()) == list(range(256)) and decode["!"] == 33 and decode["\u0120"] == 32


@pytest.mark.parametrize("case", ["missing", "float", "out of range"])
def test_bad_prefix_table_is_a_user_error(case, tmp_path):
    path = tmp_path / "table.npy"
    if case != "missing":
        np.save(path, np.zeros(10, np.float32) if case == "float" else np.array([-1, 12], np.int32))
    with pytest.raises(tg.UserError, match="prefix table"):
        tg.load_prefix_table(path, 64)
