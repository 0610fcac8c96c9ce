"""A ``Pipeline``'s added tokens, against the ``tokenizers`` library: where they are cut out of
the text when they overlap or sit side by side, the offsets of those that swallow whitespace,
and which ids ``decode(..., skip_special_tokens=True)`` leaves out.

A word-level vocabulary split at whitespace keeps the model out of the way: every difference
is in how the added tokens were found.
"""

import json
import os

import pytest

from .hf_training import assert_encodes_as_library

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers", reason="the `tokenizers` library is the reference")

from tokenizers import AddedToken, models, pre_tokenizers  # noqa: E402

from gpt.tokenizers import Tokenizer  # noqa: E402

VOCAB = {"<unk>": 0, "<pad>": 1, "<s>": 2, "</s>": 3, "a": 4, "b": 5, "c": 6, "x": 7}

#: added tokens that begin alike ("ab" is a prefix of "abc": the longer must win), one that
#: swallows the whitespace on both sides, and two special ones
TEXTS = [
    "xabcx abc ab abca",
    "abab abcabc",
    "<m>  <m>",
    "a  <m>  <m>  b",
    "a <m><m> b <m>",
    "<s> a </s> b <s></s>",
    "a<s>abc</s>  <m>",
]


@pytest.fixture(scope="module")
def both():
    theirs = hf.Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    theirs.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    theirs.add_special_tokens(["<s>", "</s>"])
    theirs.add_tokens(
        [AddedToken("ab"), AddedToken("abc"), AddedToken("<m>", lstrip=True, rstrip=True)]
    )
    return theirs, Tokenizer(json.loads(theirs.to_str()))


@pytest.mark.parametrize("text", TEXTS)
def test_added_tokens_are_cut_out_where_the_library_cuts_them(both, text):
    theirs, ours = both
    assert_encodes_as_library(ours, theirs, text, special=True)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("skip", [False, True])
def test_decode_skips_the_special_tokens_as_the_library(both, text, skip):
    theirs, ours = both
    ids = theirs.encode(text).ids
    assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(
        ids, skip_special_tokens=skip
    )
