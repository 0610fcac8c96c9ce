"""Each ``tokenizer.json`` normalizer and decoder alone, against the ``tokenizers`` library's.

The parity tests of ``test_pipeline_parity.py`` run whole pipelines, where a pre-tokenizer may
hide what a normalizer did (Whitespace drops a trailing space whether or not Strip removed it)
and decoding only ever sees the tokens of a valid encoding. Here each part gets its input
directly: a normalizer any text (``normalize_str`` is the reference), a decoder any list of
tokens (``decode``), including byte tokens that spell invalid UTF-8.
"""

import json
import os

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from .tokenizer_strategies import tricky_char

os.environ.setdefault("RAYON_NUM_THREADS", "1")
hf = pytest.importorskip("tokenizers", reason="the `tokenizers` library is the reference")

from tokenizers import decoders, normalizers  # noqa: E402

from gpt.tokenizers import decoders as our_decoders  # noqa: E402
from gpt.tokenizers import normalizers as our_normalizers  # noqa: E402


def spec_of(part) -> dict:
    """The JSON a tokenizer.json holds for one of the library's parts."""
    return json.loads(part.__getstate__())


# ----- normalizers ----------------------------------------------------------------------------

NORMALIZERS = {
    "NFKC": normalizers.NFKC(),
    "Lowercase": normalizers.Lowercase(),
    "NFD+StripAccents": normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()]),
    "Bert": normalizers.BertNormalizer(),
    "Bert-cased": normalizers.BertNormalizer(lowercase=False),
    "Bert-strip-accents-cased": normalizers.BertNormalizer(lowercase=False, strip_accents=True),
    "Replace-regex": normalizers.Replace(hf.Regex(r"\s+|ab"), "_"),
    "Strip": normalizers.Strip(),
    "Strip-right": normalizers.Strip(left=False, right=True),
    # a step that can empty the text, then one that must leave empty text alone
    "Strip+Prepend": normalizers.Sequence([normalizers.Strip(), normalizers.Prepend("▁")]),
    "Replace+Prepend": normalizers.Sequence(
        [normalizers.Replace(hf.Regex(r"\s"), ""), normalizers.Prepend("▁")]
    ),
    "Sequence": normalizers.Sequence(
        [normalizers.NFKD(), normalizers.Lowercase(), normalizers.Replace("a", "α")]
    ),
}

#: texts each normalizer treats specially: spacing marks (Mc) and enclosing marks (Me) as well
#: as nonspacing ones, final sigma, CJK, carriage returns and other controls, whitespace only
#: or at either end, a regex's matches side by side
NORMALIZER_TEXTS = [
    "\u0915\u093e\u0940 \u0939\u093f\u0902\u0926\u0940 a\u20dd Cafe\u0301 ÅNGSTRÖM",
    "ΟΔΟΣ Σίσυφος",
    "中文 字符x日本",
    "crlf\r\nend\rcr \x00nul\x01 \u200bzw \ufffd",
    "   ",
    "  both ends\t\n",
    "abab  ab ba",
    "ﬁ Ⅻ ① ㎏ Ｆｕｌｌ",
]


@pytest.mark.parametrize("name", NORMALIZERS)
def test_normalizers_give_the_library_s_text(name):
    theirs = NORMALIZERS[name]
    ours = our_normalizers.build(spec_of(theirs), "tokenizer.json")
    for text in NORMALIZER_TEXTS:
        assert ours(text) == theirs.normalize_str(text), text
        # the aligned form gives the same text, and a span for each of its characters
        aligned, spans = ours.align((text, [(k, k + 1) for k in range(len(text))]))
        assert aligned == ours(text) and len(spans) == len(aligned), text


#: text for the generated-text test: the tricky characters, those of the texts above, and
#: scripts stable for decades (each library normalizes with its own Unicode tables, and these
#: differ in version: a character assigned since, or whose case or marks changed, would differ)
stable_text = st.text(
    alphabet=st.one_of(
        tricky_char,
        st.sampled_from(sorted(set("".join(NORMALIZER_TEXTS)))),
        st.characters(max_codepoint=0x052F, blacklist_categories=("Cs", "Cn")),
    ),
    max_size=60,
)


@given(text=stable_text)
@example(text="Σ \u093e\r")
def test_normalizers_on_generated_text(text):
    for name, theirs in NORMALIZERS.items():
        ours = our_normalizers.build(spec_of(theirs), "tokenizer.json")
        assert ours(text) == theirs.normalize_str(text), name


# ----- decoders -------------------------------------------------------------------------------

DECODERS = {
    "ByteLevel": decoders.ByteLevel(),
    "WordPiece": decoders.WordPiece(),
    "WordPiece-no-cleanup": decoders.WordPiece(cleanup=False),
    "Metaspace-always": decoders.Metaspace(prepend_scheme="always"),
    "Metaspace-first": decoders.Metaspace(prepend_scheme="first"),
    "Metaspace-never": decoders.Metaspace(prepend_scheme="never"),
    "BPEDecoder": decoders.BPEDecoder(suffix="</w>"),
    "ByteFallback": decoders.ByteFallback(),
    "Strip-start": decoders.Strip(" ", 2, 0),
    "Strip-stop": decoders.Strip(" ", 0, 1),
    # (not more than a token has: the library panics when the two ends overlap)
    "Strip-both": decoders.Strip("x", 1, 1),
    "Llama": decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    ),
}

#: tokens for the decoders: words and pieces ("##" continuations, "▁" and "</w>" spellings),
#: punctuation and contractions that WordPiece's cleanup glues, byte tokens (valid and invalid
#: UTF-8 in runs, lowercase hex too), GPT-2's byte alphabet ("Ġ" a space, "Ã" and "©" the two
#: bytes of "é", "ä¸" half of "中"), tokens outside that alphabet, spaces and "x"s to strip,
#: added tokens with spaces inside (in which WordPiece's cleanup finds " do not", " ' ")
TOKENS = [
    *["the", "##re", "do", "not", "I", "'", "m", "s", "n't", "re", "ve", ".", "?", "!", ","],
    *["▁the", "▁", "re▁", "a</w>", "</w>", "b", "xx", "x a x", " ", "  a  ", "中"],
    *["<0xE2>", "<0x82>", "<0xAC>", "<0x61>", "<0x6a>", "<0xc3>", "<0xA9>", "<0xFF>"],
    *["Ġ", "Ġhi", "Ã", "©", "ä¸", "ĉ", "<s>", "a b", "do not", "' n't", "' s"],
]
token_lists = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=12)

DECODER_CASES = [
    ["I", "do", "not", "think", "so", ".", "It", "'", "s", "fine", "?"],
    ["do", "not", "##hing", "I", "'", "m", "can", "n't", "we", "'", "re", "!"],
    # cleanup runs on each token with its space: only a token with spaces inside (an added
    # token, say) holds " do not" or " ' " and what follows
    ["I", "do not", "say", "' n't", "so", "x ' s", "' re"],
    ["▁a", "▁b", "▁▁c"],
    ["▁▁", "▁a", "b▁"],  # a first token of two "▁" (a whitespace piece): both go
    ["a▁b", "▁"],
    ["  a  ", "  b  ", " "],
    ["a</w>", "b", "c</w>"],
    ["<0xE2>", "<0x82>", "a", "<0xE2>", "<0x82>", "<0xAC>", "<0xFF>", "<0x61>"],
    ["<0x6a>", "<0x6A>", "▁x"],  # byte tokens in lowercase hex are byte tokens too
    ["<0x+A>", "<0x4a>", "<0x-1>", "<0x 1>"],  # Rust's from_str_radix takes a "+" sign
    ["Ġhi", "Ġ", "Ã", "©", "ä¸", "<s>", "中", "a b"],
    ["xxx", "x a x", "xx"],
]


@pytest.mark.parametrize("name", DECODERS)
def test_decoders_give_the_library_s_text(name):
    theirs = DECODERS[name]
    ours = our_decoders.build(spec_of(theirs), "tokenizer.json")
    for tokens in DECODER_CASES:
        assert "".join(ours(tokens)) == theirs.decode(tokens), tokens


@given(tokens=token_lists)
def test_decoders_on_generated_tokens(tokens):
    for name, theirs in DECODERS.items():
        ours = our_decoders.build(spec_of(theirs), "tokenizer.json")
        assert "".join(ours(tokens)) == theirs.decode(tokens), name


@given(data=st.binary(max_size=24), cuts=st.lists(st.integers(0, 24), max_size=6))
def test_byte_level_decodes_any_bytes_as_the_library(data, cuts):
    """Any bytes (invalid UTF-8 included), spelled in GPT-2's byte alphabet and cut into tokens
    anywhere: the text the library gives (invalid bytes as U+FFFD)."""
    from gpt.tokenizers.pre_tokenizers import bytes_to_text

    text = bytes_to_text(data)
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    tokens = [text[a:b] for a, b in zip(bounds, bounds[1:])] or [""]
    ours = our_decoders.build({"type": "ByteLevel"}, "tokenizer.json")
    assert "".join(ours(tokens)) == decoders.ByteLevel().decode(tokens)
    assert "".join(ours(tokens)) == data.decode("utf-8", errors="replace")
