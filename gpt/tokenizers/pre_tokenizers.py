"""Pre-tokenization: cutting text into words before any subword algorithm runs.

Subword merges should not cross word boundaries (``"dog."`` and ``"dog!"`` ought to share the
token ``"dog"``), so text is first split into pre-tokens and the model runs inside each one.
This file holds GPT-2's pattern (``GPT2_PATTERN``: contractions, runs of letters, of digits, of
other symbols, each with at most one leading space, and whitespace runs) and its
``bytes_to_unicode`` table (the 256 bytes as printable characters, in which byte-level files
spell their tokens), and builds the pre-tokenizers of a ``tokenizer.json``: each step cuts every
piece of a list further (``Piece``).

Most steps split where a pattern matches, with a *behaviour* for the matches (``splitting``;
``char_splitting`` where every match is one character of a class). On "a-b--c" split at "-":

* ``Removed``: drop the matches: "a", "b", "c".
* ``Isolated``: keep each match as a piece of its own: "a", "-", "b", "-", "-", "c".
* ``MergedWithPrevious``: glue each match to the piece before it: "a-", "b-", "-", "c".
* ``MergedWithNext``: glue each match to the piece after it: "a", "-b", "-", "-c".
* ``Contiguous``: like Isolated, but neighbouring matches form one piece: "a", "-", "b", "--", "c".

``invert`` swaps matches and the text between them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import regex

from .base import PatternTimeoutError, TokenizerError, chain
from .fields import Part, build_part

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
    """Spaces become ``replacement`` ("▁"), which is also put before non-empty text when
    ``prepend_scheme`` is "always", or "first" and the text begins the input (``first``)."""
    text = text.replace(" ", replacement)
    prepend = prepend_scheme == "always" or (prepend_scheme == "first" and first)
    if prepend and text and not text.startswith(replacement):
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


#: Patterns this package ships. They match every character (so a plain ``findall`` loses
#: nothing) and were written to run in time linear in the text, so they run without a limit.
SHIPPED = (GPT2_PATTERN, UNIGRAM_PATTERN, METASPACE_SPLIT_PATTERN)

#: A pattern read from a file can backtrack catastrophically (``(a|a)+$``: about 40 s on 28
#: characters, twice as long with each more), so every pattern not in SHIPPED runs under the
#: ``regex`` module's ``timeout``, which makes matching slower (docs/tokenizers.md, "Loading
#: files safely"): each search may take PATTERN_TIME_LIMIT + PATTERN_TIME_PER_CHAR * len(text) s.
PATTERN_TIME_LIMIT = 1.0
PATTERN_TIME_PER_CHAR = 5e-6


def time_limit(text: str) -> float:
    """Seconds one search of a pattern from a file may take on ``text``."""
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


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte -> printable character table.

    Bytes that are already printable, non-space Latin-1 characters ('!'..'~', '¡'..'¬',
    '®'..'ÿ') map to themselves; the remaining 68 (control bytes, space, and a few others) map to
    code points 256, 257, ... in byte order. The result is a bijection over all 256 bytes.
    """
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)}
    printable |= {*range(ord("®"), ord("ÿ") + 1)}
    others = [b for b in range(256) if b not in printable]
    return {b: chr(b) for b in printable} | {b: chr(256 + k) for k, b in enumerate(others)}


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    """The inverse of ``bytes_to_unicode``."""
    return {c: b for b, c in bytes_to_unicode().items()}


def bytes_to_text(b: bytes) -> str:
    """Bytes to their GPT-2 printable spelling, e.g. b' hi' -> 'Ġhi'. (Decoding as Latin-1
    makes one character per byte, code point = byte value, which ``translate`` respells through
    the table in one pass.)"""
    return b.decode("latin-1").translate(bytes_to_unicode())


#: Characters with the Unicode White_Space property (Rust's ``char::is_whitespace``).
WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: BERT's punctuation: ASCII punctuation (even where Unicode calls it a symbol: '$'), and
#: Unicode's P* categories
PUNCT = r"[\p{P}!-/:-@\[-`{-~]"
_BERT_SPLIT = regex.compile(rf"[^{WHITESPACE}{PUNCT[1:-1]}]+|{PUNCT}")

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


def split_json(pattern: str) -> dict[str, Any]:
    """The ``Split`` step that cuts text at the matches of one of our regexes, keeping every
    piece (spelled for Oniguruma, which the file's other readers run it with)."""
    regex_ = {"Regex": to_oniguruma(pattern)}
    return {"type": "Split", "pattern": regex_, "behavior": "Isolated", "invert": False}


#: a piece of text, whether it starts the text, and where each of its characters came from in
#: the text the pre-tokenizer was given (None when nobody asks: plain encoding)
Piece = tuple[str, bool, list[int] | None]
PreTokenizer = Callable[[list[Piece]], list[Piece]]
BEHAVIOURS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def segments(
    text: str, matches: list[tuple[int, int]], invert: bool
) -> list[tuple[int, int, bool]]:
    """The whole text as (start, end, is_match) segments: the matches and the gaps between."""
    out, pos = [], 0
    for start, end in matches:
        if start > pos:
            out.append((pos, start, invert))
        out.append((start, end, not invert))
        pos = end
    if pos < len(text) or not out:
        out.append((pos, len(text), invert))
    return out


def apply_behaviour(segs: list[tuple[int, int, bool]], behaviour: str) -> list[tuple[int, int]]:
    """Spans of the pieces that ``behaviour`` makes of the segments (see the module docstring;
    a match is glued only to a neighbour that is not itself a match)."""
    if behaviour in ("Removed", "Isolated"):
        return [(s, e) for s, e, m in segs if not (m and behaviour == "Removed")]
    backwards = behaviour == "MergedWithNext"  # glue to the piece after: walk from the end
    out: list[tuple[int, int]] = []
    previous = False  # whether the segment before (in walking order) is a match
    for s, e, m in reversed(segs) if backwards else segs:
        glue = m == previous if behaviour == "Contiguous" else m and not previous
        if glue and out:
            out[-1] = (min(s, out[-1][0]), max(e, out[-1][1]))
        else:
            out.append((s, e))
        previous = m
    return out[::-1] if backwards else out


def splitting(
    pattern: str, behaviour: str, invert: bool = False, trusted: bool = False
) -> PreTokenizer:
    """The step that cuts every piece where ``pattern`` matches (``find_spans``: under its time
    limit unless ``trusted``), keeping ``behaviour``."""

    def split(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, at_start, origin in pieces:
            matches = find_spans(pattern, text, trusted)
            spans = apply_behaviour(segments(text, matches, invert), behaviour)
            out += [_cut(text, at_start, origin, s, e) for s, e in spans if e > s]  # none empty
        return out

    return split


# The pieces each behaviour makes where every match is one character of a class C, as one regex
# (N: any character not in C): a match glues only to a neighbour that is not a match itself, so
# MergedWithNext makes "-b" of "-b" but "-", "-c" of "--c".
_CHAR_PIECES = {
    "Removed": "{N}+",
    "Isolated": "{C}|{N}+",
    "MergedWithPrevious": "{N}+{C}?|{C}",
    "MergedWithNext": "{C}?{N}+|{C}",
    "Contiguous": "{C}+|{N}+",
}


def char_splitting(char_class: str, behaviour: str) -> PreTokenizer:
    """:func:`splitting` at each character of a regex character class (``[\\s]``), as one regex
    search per piece (:data:`_CHAR_PIECES`) instead of a Python loop over the matches: the
    same pieces (tests/gpt/tokenizers/test_pre_tokenizers.py holds the two together)."""
    if not char_class.startswith("[") or char_class.startswith("[^"):
        raise ValueError(f"char_splitting needs a character class [...], got {char_class!r}")
    pattern = _CHAR_PIECES[behaviour].format(C=char_class, N="[^" + char_class[1:])
    find = regex.compile(pattern).finditer

    def split(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, at_start, origin in pieces:
            out += [_cut(text, at_start, origin, *m.span()) for m in find(text)]
        return out

    return split


def words_of(pattern: regex.Pattern) -> PreTokenizer:
    """A step cutting each piece into the matches of ``pattern``."""

    def run(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, at_start, origin in pieces:
            if origin is None:  # (plain encoding: the same pieces, faster)
                words = pattern.findall(text)
                out += [(w, at_start and k == 0, None) for k, w in enumerate(words) if w]
            else:
                found = pattern.finditer(text)
                out += [_cut(text, at_start, origin, *m.span()) for m in found if m[0]]
        return out

    return run


def _cut(text: str, at_start: bool, origin: list[int] | None, s: int, e: int) -> Piece:
    """The piece ``text[s:e]`` of a piece."""
    return text[s:e], at_start and s == 0, None if origin is None else origin[s:e]


def per_piece(f: Callable[[str, bool], str], bytewise: bool = False) -> PreTokenizer:
    """A step that rewrites each piece's text (``f(text, at_start)``) without cutting it: one
    character for one (spaces made "▁"), with characters put in front (which come from the
    first), or with ``bytewise`` one for each UTF-8 byte of a character (ByteLevel)."""

    def run(pieces: list[Piece]) -> list[Piece]:
        if not pieces or pieces[0][2] is None:  # (plain encoding: no places to keep)
            return [(f(t, a), a, None) for t, a, _ in pieces]
        out = []
        for t, a, o in pieces:
            new = f(t, a)
            o = [k for c, k in zip(t, o) for _ in c.encode()] if bytewise else o
            out.append((new, a, o[:1] * (len(new) - len(o)) + o))
        return out

    return run


#: Rust's ``char::is_whitespace`` (the Unicode White_Space property)
SPACE = rf"[{WHITESPACE}]"
#: Rust's ``char::is_numeric``: Nd, Nl, No
NUMERIC = r"[\p{Nd}\p{Nl}\p{No}]"
#: the ``Whitespace`` pre-tokenizer's ``\w+|[^\w\s]+``. The library compiles this one with Rust's
#: ``regex`` crate, whose ``\w`` (alphabetic, marks, decimal digits, connector punctuation, the
#: joiners) is the ``regex`` module's, unlike the patterns of a file (``from_oniguruma``)
WHITESPACE_PATTERN = rf"\w+|[^\w{WHITESPACE}]+"


def metaspace_step(replacement: str, prepend_scheme: str, split: bool) -> PreTokenizer:
    """Spaces become ``replacement`` (``metaspace``); then optionally cut before each
    ``replacement``."""
    steps = [per_piece(lambda t, first: metaspace(t, replacement, prepend_scheme, first))]
    if split:
        steps.append(char_splitting(f"[{regex.escape(replacement)}]", "MergedWithNext"))
    return chain(steps)


def byte_level(add_prefix_space: bool, use_regex: bool) -> PreTokenizer:
    """GPT-2's step: maybe a leading space, its regex (Isolated), then each piece's UTF-8 bytes
    spelled in the printable byte alphabet (``bytes_to_unicode``)."""
    steps = []
    if add_prefix_space:
        steps.append(per_piece(lambda t, _: t if t.startswith(" ") else " " + t))
    if use_regex:  # GPT-2's pattern matches every character: Isolated is its findall
        steps.append(words_of(compile_pattern(GPT2_PATTERN)))
    steps.append(per_piece(lambda t, _: bytes_to_text(t.encode("utf-8")), bytewise=True))
    return chain(steps)


def prepend_scheme(p: Part) -> str:
    """A ``Metaspace``'s ``prepend_scheme`` (pre-tokenizer or decoder); files from before
    tokenizers 0.19 say ``add_prefix_space`` instead."""
    if "prepend_scheme" in p.spec:
        return p.choice("prepend_scheme", ("always", "first", "never"))
    return "always" if p("add_prefix_space", "bool", True) else "never"


def build(
    spec: dict[str, Any] | None,
    path: str | os.PathLike,
    where: str = "pre_tokenizer",
    depth: int = 0,
) -> PreTokenizer | None:
    """The pre-tokenizer a file describes at ``where`` (None: each piece is one word)."""
    return build_part(spec, path, where, depth, "pre-tokenizer", BUILDERS)


def _split(p: Part) -> PreTokenizer:
    pattern = p.pattern()
    expr = from_oniguruma(pattern["Regex"]) if "Regex" in pattern else None
    behaviour = p.choice("behavior", BEHAVIOURS, "Isolated")
    invert = p("invert", "bool", False)
    if expr is None:  # a literal string, which cannot backtrack
        return splitting(regex.escape(pattern["String"]), behaviour, invert, trusted=True)
    return splitting(expr, behaviour, invert)


def _digits(p: Part) -> PreTokenizer:
    individual = p("individual_digits", "bool", False)
    return char_splitting(NUMERIC, "Isolated" if individual else "Contiguous")


def _metaspace(p: Part) -> PreTokenizer:
    replacement = p.char("replacement", METASPACE)
    return metaspace_step(replacement, prepend_scheme(p), p("split", "bool", True))


BUILDERS: dict[str, Callable[[Part], PreTokenizer]] = {
    "ByteLevel": lambda p: byte_level(
        p("add_prefix_space", "bool", True), p("use_regex", "bool", True)
    ),
    "Whitespace": lambda p: splitting(WHITESPACE_PATTERN, "Removed", invert=True, trusted=True),
    "WhitespaceSplit": lambda p: char_splitting(SPACE, "Removed"),
    # split at whitespace (Removed), then around punctuation (Isolated), as one regex
    "BertPreTokenizer": lambda p: words_of(_BERT_SPLIT),
    "Punctuation": lambda p: char_splitting(PUNCT, p.choice("behavior", BEHAVIOURS, "Isolated")),
    "Digits": _digits,
    "Metaspace": _metaspace,
    "Split": _split,
    "CharDelimiterSplit": lambda p: char_splitting(
        f"[{regex.escape(p.char('delimiter'))}]", "Removed"
    ),
    "Sequence": lambda p: chain(p.steps("pretokenizers", build)),
}
