"""Pre-tokenization: cutting text into words before any subword algorithm runs.

Subword merges should not cross word boundaries: ``"dog."`` and ``"dog!"`` ought to share the
token ``"dog"`` instead of each growing its own ``"g."`` / ``"g!"``. So text is first split by a
regular expression into pre-tokens, and the subword algorithm runs inside each one.

GPT-2's pattern (Radford et al., 2019, released with the model) splits off English contractions,
runs of letters, runs of digits and runs of other symbols, each with at most one leading space,
plus whitespace runs. It needs Unicode property classes (``\\p{L}`` letters, ``\\p{N}``
numbers), which the third-party ``regex`` module provides and the stdlib ``re`` lacks.

This file also holds GPT-2's ``bytes_to_unicode`` table, a fixed bijection from the 256 byte
values to 256 printable characters. Byte-level BPE files (``vocab.json``, ``merges.txt``,
Hugging Face ``tokenizer.json``) store byte strings through it so they remain readable text.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import regex

from .base import PatternTimeoutError, TokenizerError

#: GPT-2's pre-tokenizer pattern (the default for ByteBPE).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

#: SentencePiece's stand-in for a space: spaces become this character so they can live inside
#: tokens, and decoding turns it back into a space.
METASPACE = "\u2581"

#: The Unigram pre-tokenizer: like GPT-2's, but applied after spaces became METASPACE, so a word
#: keeps its leading "▁" (letters, numbers and other symbols each form their own runs).
UNIGRAM_PATTERN = (
    rf"{METASPACE}?\p{{L}}+|{METASPACE}?\p{{N}}+|{METASPACE}?[^\s\p{{L}}\p{{N}}{METASPACE}]+"
    rf"|\s+|{METASPACE}"
)


def metaspace(text: str, replacement: str, prepend_scheme: str, first: bool) -> str:
    """Spaces become ``replacement`` ("▁"), which is also put before the text when
    ``prepend_scheme`` is "always", or "first" and the text begins the input (``first``)."""
    text = text.replace(" ", replacement)
    prepend = prepend_scheme == "always" or (prepend_scheme == "first" and first)
    if prepend and not text.startswith(replacement):
        text = replacement + text
    return text


#: Hugging Face's ``Metaspace(split=True)`` expressed as a pattern: each piece starts at a "▁".
METASPACE_SPLIT_PATTERN = rf"{METASPACE}?[^{METASPACE}]+|{METASPACE}"


@lru_cache(maxsize=64)
def compile_pattern(pattern: str) -> regex.Pattern:
    """Compile (and cache) a pre-tokenizer pattern, with a clear error if it is invalid."""
    try:
        return regex.compile(pattern)
    except regex.error as e:
        raise TokenizerError(f"invalid pre-tokenizer pattern {pattern!r}: {e}") from None


def pretokenize(text: str, pattern: str = GPT2_PATTERN) -> list[str]:
    """Split ``text`` into pre-tokens; joining them always gives back ``text``."""
    return splitter(pattern)(text)


#: Patterns this package ships. They match every character (so a plain ``findall`` loses
#: nothing) and were written to run in time linear in the text, so they run without a limit.
SHIPPED = (GPT2_PATTERN, UNIGRAM_PATTERN, METASPACE_SPLIT_PATTERN)

# ----- time limits for patterns from elsewhere -------------------------------------------------
#
# A pattern read from a file can backtrack catastrophically: ``(a|a)+$`` takes about 40 s on 28
# characters and twice as long with each one more. So every pattern that is not in SHIPPED runs
# under the ``regex`` module's ``timeout``: each search may take at most
# PATTERN_TIME_LIMIT + PATTERN_TIME_PER_CHAR * len(text) seconds. Normal patterns need well under
# a microsecond per character, so the allowance per character is generous, and the base second
# absorbs a busy machine. The ``regex`` module then reads the clock as it matches, which makes
# matching about three times slower; that is why the shipped patterns are exempt.

PATTERN_TIME_LIMIT = 1.0
PATTERN_TIME_PER_CHAR = 5e-6


def time_limit(text: str) -> float:
    """Seconds one search of a pattern from elsewhere may take on ``text``."""
    return PATTERN_TIME_LIMIT + PATTERN_TIME_PER_CHAR * len(text)


def find_spans(pattern: str, text: str, trusted: bool = False) -> list[tuple[int, int]]:
    """The (start, end) of each match of ``pattern`` in ``text``, under a time limit (see
    above) unless the pattern is one of SHIPPED or ``trusted`` (an escaped literal, say).
    Raises PatternTimeoutError."""
    compiled = compile_pattern(pattern)
    if trusted or pattern in SHIPPED:
        return [m.span() for m in compiled.finditer(text)]
    limit = time_limit(text)
    try:
        return [m.span() for m in compiled.finditer(text, timeout=limit)]
    except TimeoutError:
        raise PatternTimeoutError(pattern, len(text), limit) from None


@lru_cache(maxsize=64)
def splitter(pattern: str) -> Callable[[str], list[str]]:
    """A function cutting text into the pattern's matches *and* the gaps between them.

    Text the pattern does not match is kept as pre-tokens of its own (Hugging Face calls this
    the "isolated" split), so a custom pattern can never silently drop characters. For the
    built-in patterns, which match everything, this is plain ``findall``. Patterns from
    elsewhere run under a time limit (``find_spans``).
    """
    compiled = compile_pattern(pattern)
    if pattern in SHIPPED:
        return compiled.findall

    def split(text: str) -> list[str]:
        out, pos = [], 0
        for start, end in find_spans(pattern, text):
            if start > pos:
                out.append(text[pos:start])
            if end > start:
                out.append(text[start:end])
            pos = end
        if pos < len(text):
            out.append(text[pos:])
        return out

    return split


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte -> printable character table.

    Bytes that are already printable, non-space Latin-1 characters ('!'..'~', '¡'..'¬',
    '®'..'ÿ') map to themselves; the remaining 68 (control bytes, space, and a few others) map to
    code points 256, 257, ... in byte order. The result is a bijection over all 256 bytes.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    """The inverse of ``bytes_to_unicode``."""
    return {c: b for b, c in bytes_to_unicode().items()}


def bytes_to_text(b: bytes) -> str:
    """Bytes to their GPT-2 printable spelling, e.g. b' hi' -> 'Ġhi'. (Decoding as Latin-1
    makes one character per byte, code point = byte value, which ``translate`` respells through
    the table in one pass.)"""
    return b.decode("latin-1").translate(bytes_to_unicode())


def text_to_bytes(s: str) -> bytes:
    """The inverse of ``bytes_to_text``; raises KeyError for a character outside the table."""
    table = unicode_to_bytes()
    return bytes(table[c] for c in s)


# ----- BERT-style text handling (used by WordPiece) --------------------------------------------
#
# BERT (Devlin et al., 2019) normalizes text (drop control characters, optionally lowercase and
# strip accents, put spaces around CJK ideographs) and then splits on whitespace and around every
# punctuation character. These functions follow the definitions the Hugging Face ``tokenizers``
# library uses for its ``BertNormalizer`` and ``BertPreTokenizer``, so WordPiece files from there
# encode identically here.

#: Characters with the Unicode White_Space property (Rust's ``char::is_whitespace``).
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: ASCII punctuation counts as punctuation for BERT even where Unicode calls it a symbol ('$').
_PUNCT = r"\p{P}!-/:-@\[-`{-~"
_BERT_SPLIT = regex.compile(rf"[^{WHITESPACE}{_PUNCT}]+|[{_PUNCT}]")
_CJK = regex.compile(
    "([\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
    "\U0002b740-\U0002b81f\U0002b920-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f])"
)
#: Control/format/private-use characters (except tab, newline, CR), plus NUL and U+FFFD.
#: (unassigned code points are kept, as the ``tokenizers`` library keeps them)
_BERT_DROP = regex.compile(r"[\x00\ufffd]|(?![\t\n\r])[\p{Cc}\p{Cf}\p{Co}\p{Cs}]")
_BERT_SPACE = regex.compile(rf"[{WHITESPACE}]")
_MARKS = regex.compile(r"\p{Mn}")


def lower_chars(text: str) -> str:
    """Lowercase character by character, as the ``tokenizers`` library does: no final-sigma
    rule, so "ΟΔΟΣ" -> "οδοσ" where ``str.lower`` gives "οδος"."""
    return "".join(c.lower() for c in text)


#: Oniguruma's ``\w`` (the engine the ``tokenizers`` library runs a file's regexes with), as
#: measured against it over every code point below U+110000: alphabetic characters, marks,
#: decimal digits, connector punctuation, and Latin-1's "¹²³¼½¾". Inside a [...] set its ``\w``
#: lacks those six (``ONIG_SET_WORD``), so ``[^\w\s]`` matches "²" where ``\w`` does too.
ONIG_WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\u00b2\u00b3\u00b9\u00bc-\u00be"
ONIG_SET_WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}"
#: The ``regex`` module's ``\w`` (and Rust's): Oniguruma's set ``\w`` and the joiners U+200C/D.
REGEX_WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\u200c\u200d"


def _respell_words(pattern: str, spell: Callable[[str, bool], str]) -> str:
    r"""``pattern`` with each ``\w`` and ``\W`` replaced by ``spell(letter, inside_a_set)``."""
    out, i, depth = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append(spell(nxt, depth > 0) if nxt in "wW" else pattern[i : i + 2])
            i += 2
            continue
        if c == "[":
            depth += 1
        elif c == "]" and depth:
            depth -= 1
        out.append(c)
        i += 1
    return "".join(out)


def from_oniguruma(pattern: str) -> str:
    r"""A pattern from a ``tokenizer.json`` with ``\w`` / ``\W`` spelled out so that the
    ``regex`` module matches what Oniguruma matches."""

    def spell(letter: str, in_set: bool) -> str:
        if in_set:  # the regex module's \W lacks the joiners, Oniguruma's set \W has them
            return ONIG_SET_WORD if letter == "w" else r"\W\u200c\u200d"
        return f"[{ONIG_WORD}]" if letter == "w" else f"[^{ONIG_WORD}]"

    return _respell_words(pattern, spell)


def to_oniguruma(pattern: str) -> str:
    r"""The inverse of ``from_oniguruma``: one of our patterns (the ``regex`` module's syntax)
    with ``\w`` / ``\W`` spelled out so that Oniguruma, reading it from a ``tokenizer.json``,
    matches what the ``regex`` module matches. ``\W`` inside a [...] set has no such spelling
    (Oniguruma's holds the joiners, and a set cannot take them out) and is refused."""

    def spell(letter: str, in_set: bool) -> str:
        if letter == "w":
            return REGEX_WORD if in_set else f"[{REGEX_WORD}]"
        if in_set:
            raise TokenizerError(
                rf"pattern {pattern!r} has \W inside [...], which Oniguruma (the tokenizers "
                r"library's regex engine) reads differently; write [^\w...] instead"
            )
        return f"[^{REGEX_WORD}]"

    return _respell_words(pattern, spell)


def bert_normalize(
    text: str,
    clean_text: bool = True,
    handle_chinese_chars: bool = True,
    strip_accents: bool | None = None,
    lowercase: bool = False,
) -> str:
    """BERT's normalizer. ``strip_accents=None`` means "strip them when lowercasing"."""
    import unicodedata

    if clean_text:
        text = _BERT_SPACE.sub(" ", _BERT_DROP.sub("", text))
    if handle_chinese_chars:
        text = _CJK.sub(r" \1 ", text)
    if strip_accents or (strip_accents is None and lowercase):
        text = _MARKS.sub("", unicodedata.normalize("NFD", text))
    if lowercase:
        text = lower_chars(text)
    return text


def bert_pretokenize(text: str) -> list[str]:
    """Split on whitespace (dropped) and around each punctuation character (kept alone)."""
    return _BERT_SPLIT.findall(text)
