"""Hypothesis strategies for tokenizer tests: text of every kind a tokenizer must survive."""

from __future__ import annotations

from hypothesis import strategies as st

#: any Unicode scalar value (surrogates cannot be encoded as UTF-8, so they are excluded)
any_char = st.characters(blacklist_categories=("Cs",))

#: characters that stress tokenizers: emoji (multi-byte, ZWJ sequences), combining marks,
#: CJK, right-to-left scripts, whitespace of several kinds, and the SentencePiece space sign
tricky_char = st.sampled_from(
    list(
        "aé e\u0301\u0300ñ\n\t\r \u00a0\u3000中文字🤗👍🏽\u200d👨‍👩‍👧ςσשלום١٢3'\".,!?<>|\u2581\x00"
    )
)

#: text where ASCII meets what joins it into one grapheme cluster: combining marks after it
#: (U+0301, U+0300), a Prepend mark before it (U+0600), ZWJ, CR LF, regional indicators and
#: emoji, beside ASCII letters, controls and whitespace that character maps rewrite
#: (SentencePiece's nmt_nfkc drops controls and makes tabs and newlines spaces; nfkc_cf
#: lower-cases A-Z) and full-width forms and ligatures that it rewrites too
cluster_edge_text = st.text(
    alphabet=st.sampled_from(
        list("aAZz \t\n\r\x01\x7f.\u0301\u0300\u0600\u200d\u0915\u093f👨🇯🇵Ａﬁ가\u1100\u1161é")
    ),
    max_size=60,
)

#: text mixing both
unicode_text = st.text(alphabet=st.one_of(any_char, tricky_char), max_size=120)

#: short ASCII-ish words and spaces, for training tiny tokenizers
small_corpus = st.text(alphabet=st.sampled_from(list("abcde \n.")), min_size=1, max_size=80)


def text_over(alphabet: str, max_size: int = 80) -> st.SearchStrategy[str]:
    """Text drawn only from the given characters."""
    return st.text(alphabet=st.sampled_from(sorted(set(alphabet))), max_size=max_size)
