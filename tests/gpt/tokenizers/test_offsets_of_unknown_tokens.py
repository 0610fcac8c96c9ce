"""Offsets of unknown tokens, against the ``tokenizers`` library.

The library knows where each unknown token comes from (the word, or the characters of a word,
that the model could not cover); we place unknown tokens in the text between their known
neighbours. These cases, found by differential fuzzing, are where that placement went wrong:
an unknown token stands for a whole word (WordPiece, WordLevel) or for unknown characters of
one word (BPE, Unigram), words being what the pre-tokenizer cuts; its text, when it is an
added token, is one unit; and the token after a whole unknown word starts a word of its own.
"""

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpt.tokenizers as tk

from .hf_training import assert_encodes_as_library, hf_trained

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

CORPUS = "the quick brown fox jumps over the lazy dog naive cafe abc abd xyz hello world " * 50


def _train(model, trainer, *parts, **named_parts):
    return hf_trained(CORPUS, model, trainer, *parts, **named_parts)


def _not_added(t):
    """The same tokenizer with its unknown token not an added token (plain text in the text)."""
    data = json.loads(t.to_str())
    data["added_tokens"] = []
    return hf.Tokenizer.from_str(json.dumps(data))


def _wordpiece(**kw):
    return models.WordPiece(unk_token="[UNK]", **kw), trainers.WordPieceTrainer(
        vocab_size=60, special_tokens=["[UNK]"], show_progress=False
    )


def _bpe(fuse):
    return models.BPE(unk_token="<unk>", fuse_unk=fuse), trainers.BpeTrainer(
        vocab_size=60, special_tokens=["<unk>"], show_progress=False
    )


def _unigram():
    return models.Unigram(), trainers.UnigramTrainer(
        vocab_size=60, special_tokens=["<unk>"], unk_token="<unk>", show_progress=False
    )


BUILDERS = {
    "wordpiece-bert": lambda: _train(
        *_wordpiece(), normalizers.BertNormalizer(), pre_tokenizers.BertPreTokenizer()
    ),
    "wordpiece-whitespace": lambda: _train(*_wordpiece(), pre=pre_tokenizers.Whitespace()),
    "wordlevel": lambda: _train(
        models.WordLevel(unk_token="[UNK]"),
        trainers.WordLevelTrainer(vocab_size=30, special_tokens=["[UNK]"], show_progress=False),
        pre=pre_tokenizers.Whitespace(),
    ),
    "bpe-whitespace": lambda: _train(*_bpe(False), pre=pre_tokenizers.Whitespace()),
    "bpe-whitespace-fused": lambda: _train(*_bpe(True), pre=pre_tokenizers.Whitespace()),
    "bpe-whitespace-not-added": lambda: _not_added(
        _train(*_bpe(False), pre=pre_tokenizers.Whitespace())
    ),
    "bpe-no-pre-tokenizer": lambda: _train(*_bpe(False)),
    "bpe-no-pre-tokenizer-fused": lambda: _train(*_bpe(True)),
    "unigram": lambda: _train(
        *_unigram(), pre=pre_tokenizers.Metaspace(), decoder=decoders.Metaspace()
    ),
    "unigram-nfkc": lambda: _train(
        *_unigram(), normalizers.NFKC(), pre_tokenizers.Metaspace(), decoders.Metaspace()
    ),
    "unigram-not-added": lambda: _not_added(
        _train(*_unigram(), pre=pre_tokenizers.Metaspace(), decoder=decoders.Metaspace())
    ),
}

_cache: dict = {}


def pair(name, tmp_path_factory):
    """(the library's tokenizer, ours read from its file)"""
    if name not in _cache:
        theirs = BUILDERS[name]()
        path = tmp_path_factory.mktemp("unk") / "tokenizer.json"
        theirs.save(str(path))
        _cache[name] = theirs, tk.load(path)
    return _cache[name]


def check(name, tmp_path_factory, text):
    theirs, ours = pair(name, tmp_path_factory)
    assert_encodes_as_library(ours, theirs, text, label=(name, text))


CASES = [
    # a whole unknown word each, where the pre-tokenizer cuts words without spaces between them
    ("wordpiece-bert", ".a▁"),
    ("wordpiece-bert", "?t🤗"),
    ("wordpiece-whitespace", "ﬁe,"),
    ("wordlevel", "!ot"),
    # the known token after unknown words is not looked for inside them
    ("wordpiece-bert", "ﬁl\xa0🤗中l"),
    ("wordpiece-bert", "xⅫ?x"),
    ("wordpiece-whitespace", "Qc!c"),
    ("wordpiece-whitespace", "lZ!l"),
    # the added unknown token's text is one unit beside unknown words
    ("wordlevel", "e\u0301[UNK]"),
    ("bpe-whitespace", ",<unk>"),
    ("bpe-whitespace", "▁<unk>."),
    ("bpe-whitespace-fused", "xo?<unk>!"),
    # fused: one unknown token per word
    ("bpe-whitespace-fused", "ⅫZ,"),
    ("bpe-no-pre-tokenizer-fused", "\nQ"),
    # whitespace that is a token (no pre-tokenizer drops it) is not skipped to reach "<unk>"
    ("bpe-no-pre-tokenizer", "\n <unk>e\u0301h"),
    ("bpe-no-pre-tokenizer-fused", "\n<unk>b"),
    # "<unk>" as plain text is three words, none of them the unknown token
    ("bpe-whitespace-not-added", "<unk>"),
    # Metaspace keeps whitespace other than spaces inside the word
    ("unigram", "?\t"),
    ("unigram-nfkc", "\t中"),
    ("unigram-not-added", ".\xa0"),
    ("unigram", "\t<unk>"),
    # after the added unknown token, the "▁" Metaspace puts before the next stretch of text
    ("unigram-nfkc", "<unk>w"),
    # an unknown character right before the added unknown token: a stretch of its own
    ("unigram", "Q<unk>,"),
    ("unigram", "é<unk>中"),
    ("unigram-nfkc", "中<unk>o"),
    # not added, "<unk>" is the vocabulary's piece, and the unknown characters of its word
    # beside it are fused into the same token (whitespace other than spaces included)
    ("unigram-not-added", "<unk>\n"),
    ("unigram-not-added", "b<unk>🤗"),
    ("unigram-not-added", " <unk>. "),
    ("unigram-not-added", "\t<unk>ﬁ"),
    ("unigram-not-added", " \n<unk>lo"),
    ("unigram-not-added", "y<unk>Ⅻee"),
]


@pytest.mark.parametrize("name, text", CASES)
def test_offsets_around_unknown_tokens(name, text, tmp_path_factory):
    check(name, tmp_path_factory, text)


#: known and unknown characters, whitespace of several kinds, the unknown tokens' spellings
PIECES = list("abcdehlotw xyz") + list("QZ!?.,é中🤗") + ["  ", "\t", "\n", "e\u0301", "\xa0"]
PIECES += ["ﬁ", "Ⅻ", "▁"]
FUZZED = [n for n in BUILDERS if not n.startswith("unigram")]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_offsets_around_unknown_tokens_on_generated_text(data, tmp_path_factory):
    name = data.draw(st.sampled_from(FUZZED))
    pieces = PIECES + (["<unk>"] if "bpe" in name else ["[UNK]"])
    text = "".join(data.draw(st.lists(st.sampled_from(pieces), max_size=8)))
    check(name, tmp_path_factory, text)


@settings(max_examples=100, deadline=None)
@given(text=st.lists(st.sampled_from([*PIECES, "<unk>"]), max_size=8).map("".join))
def test_unigram_offsets_around_unknown_tokens_on_generated_text(text, tmp_path_factory):
    for name in ("unigram", "unigram-nfkc", "unigram-not-added"):
        check(name, tmp_path_factory, text)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_segments_cut_the_text_the_model_sees_into_what_encode_gives(data, tmp_path_factory):
    """``segments`` (what the offsets are looked for in, stretch by stretch): one after another
    they cover the normalized text without gaps, and their ids are ``encode``'s."""
    name = data.draw(st.sampled_from(sorted(BUILDERS)))
    text = "".join(data.draw(st.lists(st.sampled_from([*PIECES, "<unk>", "[UNK]"]), max_size=8)))
    _, ours = pair(name, tmp_path_factory)
    segments = ours.segments(text)
    seen = ours.normalize_aligned(text)[0]
    assert [(a, b) for a, b, _, _ in segments] == list(
        zip([0] + [b for _, b, _, _ in segments[:-1]], [b for _, b, _, _ in segments])
    )
    assert (segments[-1][1] if segments else 0) == len(seen)
    assert [i for _, _, ids, _ in segments for i in ids] == ours.encode(text)
