"""Which original characters each normalized character comes from (``alignment.py``), one
character at a time, against the ``tokenizers`` library.

Through a whole pipeline a word's offsets are the union of its characters' spans, which hides
a character given its neighbour's span. Here the pre-tokenizer cuts the normalized text into
single characters and a word-level vocabulary holds each of them, so every token is one
normalized character and its offsets are that character's span.

Left out: combining marks out of canonical order ("a" + U+0308 + U+0323, which NFC reorders),
which the library aligns by position rather than by character.
"""

import json
import os

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from .hf_training import library_offsets

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers", reason="the `tokenizers` library is the reference")

from tokenizers import models, normalizers, pre_tokenizers  # noqa: E402

import gpt.tokenizers as tk  # noqa: E402
from gpt.tokenizers import Tokenizer  # noqa: E402

NORMALIZERS = {
    "NFC": normalizers.NFC(),
    "NFKC": normalizers.NFKC(),
    "NFD": normalizers.NFD(),
    "NFKD": normalizers.NFKD(),
    "NFD+StripAccents": normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()]),
    "Lowercase": normalizers.Lowercase(),
    "Bert": normalizers.BertNormalizer(),
}

#: pieces of text whose normal forms compose, decompose or drop characters: a letter and
#: several accents (composition takes the first accent, the last one stays), Hangul jamo that
#: compose into a syllable, half-width katakana and the half-width voiced marks that NFKC makes
#: combining marks composing with them ("ｶﾞ" -> "ガ"), a ligature, a dotted capital I, a
#: spacing vowel sign (a mark of its own cluster)
PIECES = ["A", "a", "e", "Ω", "ｶﾞ", "ﾊﾟ", "ｶ", " ", "ᄀ", "ᅡ", "ᆨ", "ﬁ", "İ", "Å", "क", "ा"]
PIECES += ["\u0301", "\u0300", "\u030a", "\u0308"]
texts = st.lists(st.sampled_from(PIECES), min_size=1, max_size=10).map("".join)


def character_offsets(norm, text: str) -> tuple[list, list]:
    """(the library's, ours): ``(id, (start, end))`` of each normalized character of ``text``."""
    chars = sorted(set(norm.normalize_str(text)))
    vocab = {"<unk>": 0} | {c: k + 1 for k, c in enumerate(chars)}
    theirs = hf.Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    theirs.normalizer = norm
    theirs.pre_tokenizer = pre_tokenizers.Split(hf.Regex("."), "isolated")
    ours = Tokenizer(json.loads(theirs.to_str()))
    encoding = theirs.encode(text)
    return library_offsets(encoding), tk.encode_with_offsets(ours, text)


@pytest.mark.parametrize("name", NORMALIZERS)
@pytest.mark.parametrize(
    "text",
    [
        "A\u0301\u0301 e\u0301\u0300x",
        "A\u030a\u030a\u030a Å\u030a",
        "각 가",
        "ｶﾞ ﾊﾟ ｶﾞ\u0301 ｶｶﾞ",  # (each mark, alone, would leave its cluster without an offset)
        "ﬁ\u0301 İ\u0308 क\u093e\u0301",
    ],
)
def test_each_character_s_span_is_the_library_s(name, text):
    theirs, ours = character_offsets(NORMALIZERS[name], text)
    assert ours == theirs


@given(text=texts)
@example(text="ｶﾞ")
@example(text="A\u0308\u0308")
def test_each_character_s_span_on_generated_text(text):
    for name, norm in NORMALIZERS.items():
        theirs, ours = character_offsets(norm, text)
        assert ours == theirs, name
