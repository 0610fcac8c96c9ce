"""Our tokenizer files and the field checks of every reader: what a saved file keeps, how it
is written, and where the checks draw their lines."""

import json
import os

import pytest

import gpt.tokenizers as tk
from gpt.tokenizers import TokenizerFileError
from gpt.tokenizers.fields import MAX_NESTING, get

TEXT = "the quick brown fox jumps over the lazy dog, naïve café. " * 20
#: special tokens whose order by name is not their order by id
SPECIALS = ["<|zulu|>", "<|alpha|>", "<|mike|>"]


@pytest.mark.parametrize(
    "train",
    [
        lambda: tk.CharTokenizer.train(TEXT, special_tokens=SPECIALS),
        lambda: tk.ByteBPE.train(TEXT, 270, SPECIALS),
        lambda: tk.WordPiece.train(TEXT, 60, SPECIALS),
        lambda: tk.Unigram.train(TEXT, 60, SPECIALS),
    ],
    ids=["char", "bpe", "wordpiece", "unigram"],
)
def test_special_tokens_keep_their_ids_through_a_file(train, tmp_path):
    tok = train()
    tok.save(tmp_path / "tok.json")
    back = tk.load(tmp_path / "tok.json")
    assert back.special == tok.special
    text = "<|mike|>the<|zulu|> fox<|alpha|>"
    assert back.encode(text) == tok.encode(text)


def test_saving_replaces_the_file_atomically(tmp_path):
    """The new file is renamed over the old one: whoever holds the old file (here, a second
    name for it) still reads it whole, never a file being rewritten in place."""
    path = tmp_path / "tok.json"
    old = tk.CharTokenizer.train("abc")
    old.save(path)
    before = path.read_bytes()
    os.link(path, tmp_path / "old-link.json")
    new = tk.CharTokenizer.train("xyz and more")
    new.save(path)
    assert (tmp_path / "old-link.json").read_bytes() == before
    assert tk.load(path).itos == new.itos
    assert sorted(os.listdir(tmp_path)) == ["old-link.json", "tok.json"]  # no temporary left


def _nested(depth: int) -> dict:
    """A normalizer whose innermost part sits ``depth`` Sequences deep."""
    spec = {"type": "NFC"}
    for _ in range(depth):
        spec = {"type": "Sequence", "normalizers": [spec]}
    return spec


def test_nesting_is_refused_exactly_past_max_nesting(tmp_path):
    path = tmp_path / "tokenizer.json"
    for depth in (MAX_NESTING, MAX_NESTING + 1):
        data = {"normalizer": _nested(depth), "model": {"type": "WordLevel", "vocab": {"a": 0}}}
        path.write_text(json.dumps(data))
        if depth <= MAX_NESTING:
            assert tk.load(path).encode("a") == [0]
        else:
            with pytest.raises(TokenizerFileError, match=f"nested more than {MAX_NESTING} deep"):
                tk.load(path)


@pytest.mark.parametrize("value", [True, False])
def test_true_and_false_are_not_integers(value):
    with pytest.raises(TokenizerFileError, match="must be an integer"):
        get({"n": value}, "n", "int", "f.json")
    assert get({"n": value}, "n", "int|bool", "f.json") is value


def test_null_is_a_missing_field_unless_null_is_allowed():
    assert get({"n": None}, "n", "int", "f.json", default=7) == 7
    assert get({"n": None}, "n", "int|null", "f.json", default=7) is None
    with pytest.raises(TokenizerFileError, match="field n is missing"):
        get({"n": None}, "n", "int", "f.json")
