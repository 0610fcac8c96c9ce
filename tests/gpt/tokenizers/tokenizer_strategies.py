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

#: text where long runs of characters that join no grapheme cluster meet what joins their ends
#: into one: combining and spacing marks after (U+0301, U+0300, U+0903), a Prepend mark before
#: (U+0600), ZWJ, CR LF, regional indicators, Hangul jamo and syllables, a virama between
#: consonants; the runs (long enough for the Precompiled normalizer's fast path, in ASCII and
#: in other scripts) begin and end with characters that character maps rewrite (SentencePiece's
#: nmt_nfkc makes tabs and newlines spaces, drops controls, maps full-width forms and ligatures;
#: nfkc_cf also lower-cases)
cluster_edge_text = st.lists(
    st.sampled_from(
        [
            *"aZ \t\n\r\x01\x7f.\u0301\u0300\u0903\u0600\u200d\u0915\u094d\u093f👨🇯🇵Ａﬁ가",
            *"\u1100\u1161\u11a8é東。\ufeff",
            "Apples and Oranges\tare Fruit\nof Trees, says Z",
            "\nLF first, then more than thirty-two ASCII characters\t",
            "Ａ東京は日本の首都です。ＡＢＣ and ligatures ﬂ ﬁ end with ﬁ",
        ]
    ),
    max_size=30,
).map("".join)

#: text of characters in and out of the classes the pre-tokenizers split at: whitespace (ASCII,
#: ideographic, no-break), punctuation (ASCII and Unicode P*), digits and other numbers (ASCII,
#: Arabic-Indic, fractions), SentencePiece's "▁", letters
split_text = st.text(
    alphabet=st.sampled_from(list(" \t\n\u3000\u00a0-.!_¿、«1٢½Ⅻ▁ax中é")), max_size=24
)

#: text mixing both
unicode_text = st.text(alphabet=st.one_of(any_char, tricky_char), max_size=120)

#: short ASCII-ish words and spaces, for training tiny tokenizers
small_corpus = st.text(alphabet=st.sampled_from(list("abcde \n.")), min_size=1, max_size=80)


def text_over(alphabet: str, max_size: int = 80) -> st.SearchStrategy[str]:
    """Text drawn only from the given characters."""
    return st.text(alphabet=st.sampled_from(sorted(set(alphabet))), max_size=max_size)


@st.composite
def bpe_merges(draw) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A small character-level BPE vocabulary and its ranked merges: "a", "b", "c", "▁", "."
    (not always all of them, so some characters are unknown), then up to 14 merges of two tokens
    each, drawn so that "▁" mostly starts what it is merged into (as SentencePiece's pieces do)
    but not always: some characters are then joined from the left by a few others, some by
    none. ``<unk>`` and the byte tokens of "é" (0xC3 0xA9) and "d" (0x64) come first; the
    last of them may be merged too."""
    chars = draw(st.lists(st.sampled_from("abc▁."), min_size=1, max_size=5, unique=True))
    specials = ["<unk>", "<0xC3>", "<0xA9>", "<0x64>"]
    tokens = specials + sorted(chars)
    merges: list[tuple[str, str]] = []
    for _ in range(draw(st.integers(0, 14))):
        a = draw(st.sampled_from(tokens[len(specials) - 1 :]))  # "<0x64>" may merge too
        b = draw(st.sampled_from(tokens[len(specials) - 1 :]))
        if b.startswith("▁") and not draw(st.integers(0, 4)) == 0:
            continue  # mostly no merge puts "▁" after something
        merges.append((a, b))
        if a + b not in tokens:
            tokens.append(a + b)
    return {t: i for i, t in enumerate(tokens)}, merges


#: words for the models of ``bpe_merges``: their characters, and "d", "é", "x", none of which
#: is ever a token ("d" and "é" have byte tokens, "x" has none)
bpe_words = st.text(alphabet=st.sampled_from("abc▁.dxé"), max_size=40)
