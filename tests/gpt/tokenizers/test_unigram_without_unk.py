"""A Unigram ``tokenizer.json`` with ``"unk_id": null``: no unknown token.

The ``tokenizers`` library loads such a file and refuses only text holding a character that no
vocabulary piece is on its own ("Encountered an unknown token but `unk_id` is missing"), even
where a longer piece covers it and even with byte fallback. We do the same, with an error that
names the character and where it is.
"""

import json
import os

import pytest

import gpt.tokenizers as tk
from gpt.tokenizers import TokenizerError
from gpt.tokenizers.pre_tokenizers import METASPACE_SPLIT_PATTERN

from .hf_training import assert_encodes_as_library

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers")

PIECES = [["▁", -1.0], ["ab", -2.0], ["b", -3.0], ["c", -3.5], ["▁c", -2.5], ["é", -4.0]]
BYTES = [[f"<0x{b:02X}>", -9.0] for b in range(256)]

#: texts every variant below encodes, and texts with a character no piece is alone ("a" is only
#: inside "ab", "z" and "☃" are nowhere, " " is "▁" only where Metaspace makes it so)
ENCODABLE = ["b", "c b", "cbc", "é", "", "bb  c"]
REFUSED = ["ab", "z", "b☃", "c a", "zzz bz"]


def unigram_file(normalizer=None, byte_fallback=False) -> dict:
    meta = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": normalizer,
        "pre_tokenizer": meta,
        "post_processor": None,
        "decoder": meta,
        "model": {
            "type": "Unigram",
            "unk_id": None,
            "vocab": PIECES + (BYTES if byte_fallback else []),
            "byte_fallback": byte_fallback,
        },
    }


VARIANTS = {
    "Metaspace alone": ({}, tk.Tokenizer),
    "Pipeline (NFKC)": ({"normalizer": {"type": "NFKC"}}, tk.Tokenizer),
    "Pipeline (byte fallback)": ({"byte_fallback": True}, tk.Tokenizer),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_loads_and_refuses_only_what_the_library_refuses(variant, tmp_path):
    options, cls = VARIANTS[variant]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(unigram_file(**options)), encoding="utf-8")
    theirs = hf.Tokenizer.from_file(str(path))
    ours = tk.load(path)
    assert type(ours) is cls
    assert ours.unk_token is None and ours.unk_id is None
    for text in ENCODABLE:
        assert_encodes_as_library(ours, theirs, text)
    for text in REFUSED:
        with pytest.raises(Exception, match="unk_id` is missing"):
            theirs.encode(text, add_special_tokens=False)
        with pytest.raises(TokenizerError) as info:
            ours.encode(text)
        assert "\n" not in str(info.value)
        assert "no unknown token (unk_id is null)" in str(info.value)


def test_the_error_names_the_character_and_its_place():
    tok = tk.Unigram([(t, s) for t, s in PIECES], [], None, pattern=METASPACE_SPLIT_PATTERN)
    message = (
        "cannot encode the character '☃' (U+2603) at position 2 of the word '▁b☃b': no "
        "vocabulary piece is that character alone, and the model has no unknown token "
        "(unk_id is null)"
    )
    with pytest.raises(TokenizerError) as info:
        tok.encode("c b☃b")
    assert str(info.value) == message
    # a piece that holds the character is not enough: "a" exists only inside "ab"
    with pytest.raises(TokenizerError, match="the character 'a' \\(U\\+0061\\) at position 1"):
        tok.encode("ab")


def test_files_without_an_unknown_token_round_trip(tmp_path):
    # our tokenizer.json keeps "unk_id": null (the library reads it back the same), and so does
    # our own format
    tok = tk.Unigram([(t, s) for t, s in PIECES], [], None, pattern=METASPACE_SPLIT_PATTERN)
    tok.save(tmp_path / "tokenizer.json")
    data = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    assert data["model"]["unk_id"] is None
    theirs = hf.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert theirs.encode("cbc b", add_special_tokens=False).ids == tok.encode("cbc b")
    tok.save(tmp_path / "ours.json")
    again = tk.load(tmp_path / "ours.json")
    assert again.unk_token is None
    assert again.encode("cbc b") == tok.encode("cbc b")
    with pytest.raises(TokenizerError, match="'z'"):
        again.encode("z")
