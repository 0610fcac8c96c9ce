"""The ``tokenizer.json`` we write for our own classes, read by the ``tokenizers`` library: each
setting a class has (a ByteBPE's prefix space, a Unigram's prepend scheme, which tokens are
special) must mean to the library what it means here. And an old file's settings, in the form
the library still reads, mean here what they mean there."""

import json
import os

import pytest

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers", reason="the `tokenizers` library is the reference")

import gpt.tokenizers as tk  # noqa: E402
from gpt.tokenizers import Tokenizer  # noqa: E402

TEXT = "the quick brown fox jumps over the lazy dog, the end. " * 20
TEXTS = ["the fox", " the  fox ", "  lazy", "fox<|eot|>the<|eot|> dog", "<|eot|>", ""]


def library_reading(tok) -> "hf.Tokenizer":
    return hf.Tokenizer.from_str(json.dumps(tok.to_hf_json()))


@pytest.mark.parametrize("prefix_space", [False, True])
def test_a_byte_bpe_s_prefix_space_reaches_the_library(prefix_space):
    trained = tk.ByteBPE.train(TEXT, 280, ["<|eot|>"])
    ours = tk.ByteBPE(trained.vocab, trained.merges, trained.special, add_prefix_space=prefix_space)
    theirs = library_reading(ours)
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text).ids, text
    # and it is there: "fox" is encoded as " fox" is without it
    assert (ours.encode("fox") == trained.encode(" fox")) == prefix_space


@pytest.mark.parametrize("scheme", ["always", "first", "never"])
def test_a_unigram_s_prepend_scheme_reaches_the_library(scheme):
    ours = tk.Unigram.train(TEXT, 60, ["<|eot|>"], prepend_scheme=scheme)
    theirs = library_reading(ours)
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == theirs.encode(text).ids, text
        ordinary = [i for i in ids if i not in ours.special.values()]
        assert theirs.decode(ordinary) == ours.decode(ordinary), text
    # and it is there: only "never" decodes a leading space back
    assert (ours.decode(ours.encode(" the fox")) == " the fox") == (scheme == "never")


@pytest.mark.parametrize("kind", ["bpe", "wordpiece", "unigram"])
def test_our_special_tokens_are_special_to_the_library(kind):
    """The library leaves out of ``decode`` exactly the tokens that are special here."""
    train = {"bpe": tk.ByteBPE, "wordpiece": tk.WordPiece, "unigram": tk.Unigram}[kind]
    ours = train.train(TEXT, 280 if kind == "bpe" else 60, ["<|eot|>", "<|pad|>"])
    theirs = library_reading(ours)
    ids = ours.encode("fox<|eot|>the<|pad|>")
    special = {ours.special["<|eot|>"], ours.special["<|pad|>"]}
    assert special <= set(ids)
    ordinary = [i for i in ids if i not in special]
    assert theirs.decode(ids, skip_special_tokens=True) == theirs.decode(ordinary)
    assert theirs.decode(ids, skip_special_tokens=False) != theirs.decode(ordinary)


def test_an_old_metaspace_file_prepends_as_the_library_reads_it():
    """Files from before the library's ``prepend_scheme`` say ``add_prefix_space: true``,
    which it reads as "always": a "▁" before every piece, after an added token too."""
    data = tk.Unigram.train(TEXT, 60, ["<|eot|>"]).to_hf_json()
    legacy = {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}
    data["pre_tokenizer"] = data["decoder"] = legacy
    theirs = hf.Tokenizer.from_str(json.dumps(data))
    ours = Tokenizer(data)
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text).ids, text
