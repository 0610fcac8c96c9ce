"""Pre-tokenizers of a ``tokenizer.json`` pipeline: cutting normalized text into words.

In the ``tokenizers`` library a pre-tokenizer works on a list of pieces; each step cuts every
piece further. Here a piece is ``(text, at_start)``, where ``at_start`` says whether the piece
begins the original text (``Metaspace`` with ``prepend_scheme="first"`` needs to know).

Most steps are one operation, "split on what a pattern matches", with a *behaviour* for the
matched parts (``splitting``). The pattern is a regex (its matches), or a character class
(each matching character is one match: ``char_splitting``, the same cut as one regex). The
behaviours, on "a-b--c" split at "-":

* ``Removed``: drop the matches: "a", "b", "c".
* ``Isolated``: keep each match as a piece of its own: "a", "-", "b", "-", "-", "c".
* ``MergedWithPrevious``: glue each match to the piece before it: "a-", "b-", "-", "c".
* ``MergedWithNext``: glue each match to the piece after it: "a", "-b", "-", "-c".
* ``Contiguous``: like Isolated, but neighbouring matches form one piece: "a", "-", "b", "--", "c".

``invert`` swaps matches and the text between them. The step types (``build``):
``Whitespace`` (words ``\\w+`` and runs of other non-space symbols), ``WhitespaceSplit`` (cut at
whitespace), ``BertPreTokenizer``, ``Punctuation``, ``Digits``, ``Metaspace`` (spaces become
"▁"), ``Split`` (a file's own pattern, run under a time limit), ``CharDelimiterSplit``,
``ByteLevel`` (GPT-2: its regex, then every byte spelled as a printable character) and
``Sequence``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import regex

from .base import TokenizerFileError
from .fields import get, part_type
from .normalizers import pattern_field
from .pretokenize import (
    GPT2_PATTERN,
    METASPACE,
    WHITESPACE,
    bert_pretokenize,
    bytes_to_text,
    find_spans,
    from_oniguruma,
    metaspace,
    splitter,
)

Piece = tuple[str, bool]
PreTokenizer = Callable[[list[Piece]], list[Piece]]
#: where a pattern matches: the (start, end) of each match, in order
Matcher = Callable[[str], list[tuple[int, int]]]

BEHAVIOURS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


def regex_matcher(pattern: str, trusted: bool = False) -> Matcher:
    """Matches of a regex. A file's own pattern runs under ``pretokenize.find_spans``' time
    limit; ``trusted`` patterns (this module's) run without one."""
    if trusted:
        compiled = regex.compile(pattern)
        return lambda text: [m.span() for m in compiled.finditer(text)]
    return lambda text: find_spans(pattern, text)


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
    if behaviour == "Removed":
        return [(s, e) for s, e, m in segs if not m]
    if behaviour == "Isolated":
        return [(s, e) for s, e, _ in segs]
    out: list[list[int]] = []
    previous_match = False
    if behaviour == "MergedWithPrevious":
        for s, e, m in segs:
            if m and not previous_match and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            previous_match = m
    elif behaviour == "MergedWithNext":
        for s, e, m in reversed(segs):
            if m and not previous_match and out:
                out[-1][0] = s
            else:
                out.append([s, e])
            previous_match = m
        out.reverse()
    elif behaviour == "Contiguous":
        for s, e, m in segs:
            if m == previous_match and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            previous_match = m
    return [(s, e) for s, e in out]


def splitting(matcher: Matcher, behaviour: str, invert: bool = False) -> PreTokenizer:
    """The step that cuts every piece where ``matcher`` matches, keeping ``behaviour``."""

    def split(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, at_start in pieces:
            spans = apply_behaviour(segments(text, matcher(text), invert), behaviour)
            for s, e in spans:
                if e > s:  # empty pieces are dropped
                    out.append((text[s:e], at_start and s == 0))
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
        for text, at_start in pieces:
            out += [(m[0], at_start and m.start() == 0) for m in find(text)]
        return out

    return split


def words_of(split: Callable[[str], list[str]]) -> PreTokenizer:
    """A step cutting each piece with ``split``, a function that returns the words in order."""

    def run(pieces: list[Piece]) -> list[Piece]:
        out = []
        for text, at_start in pieces:
            out.extend((w, at_start and k == 0) for k, w in enumerate(split(text)) if w)
        return out

    return run


def per_piece(f: Callable[[str, bool], str]) -> PreTokenizer:
    """A step that rewrites each piece's text (``f(text, at_start)``) without cutting it."""
    return lambda pieces: [(f(t, a), a) for t, a in pieces]


def sequence(steps: list[PreTokenizer]) -> PreTokenizer:
    def run(pieces: list[Piece]) -> list[Piece]:
        for step in steps:
            pieces = step(pieces)
        return pieces

    return run


# ----- the character classes of the tokenizers library -----------------------------------------

#: Rust's ``char::is_whitespace`` (the Unicode White_Space property)
SPACE = rf"[{WHITESPACE}]"
#: BERT's punctuation: ASCII punctuation, and Unicode's P* categories
PUNCT = r"[\p{P}!-/:-@\[-`{-~]"
#: Rust's ``char::is_numeric``: Nd, Nl, No
NUMERIC = r"[\p{Nd}\p{Nl}\p{No}]"
#: the ``Whitespace`` pre-tokenizer's ``\w+|[^\w\s]+``. The library compiles this one with Rust's
#: ``regex`` crate, whose ``\w`` (alphabetic, marks, decimal digits, connector punctuation, the
#: joiners) is the ``regex`` module's, unlike the patterns of a file (``from_oniguruma``)
WHITESPACE_PATTERN = rf"\w+|[^\w{WHITESPACE}]+"


def metaspace_step(replacement: str, prepend_scheme: str, split: bool) -> PreTokenizer:
    """Spaces become ``replacement`` (``pretokenize.metaspace``, as the Unigram class does it);
    then optionally cut before each ``replacement``."""
    steps = [per_piece(lambda t, first: metaspace(t, replacement, prepend_scheme, first))]
    if split:
        steps.append(char_splitting(f"[{regex.escape(replacement)}]", "MergedWithNext"))
    return sequence(steps)


def byte_level(add_prefix_space: bool, use_regex: bool) -> PreTokenizer:
    """GPT-2's step: maybe a leading space, its regex (Isolated), then each piece's UTF-8 bytes
    spelled in the printable byte alphabet (``pretokenize.bytes_to_unicode``)."""
    steps = []
    if add_prefix_space:
        steps.append(per_piece(lambda t, _: t if t.startswith(" ") else " " + t))
    if use_regex:  # GPT-2's pattern matches every character: Isolated is its findall
        steps.append(words_of(splitter(GPT2_PATTERN)))
    steps.append(per_piece(lambda t, _: bytes_to_text(t.encode("utf-8"))))
    return sequence(steps)


def _behaviour(spec: dict, path, where: str, default: str) -> str:
    behaviour = get(spec, "behavior", "str", path, where, default)
    if behaviour not in BEHAVIOURS:
        raise TokenizerFileError(
            path, f"field {where}.behavior must be one of {BEHAVIOURS}, got {behaviour!r}"
        )
    return behaviour


def build(
    spec: dict[str, Any] | None,
    path: str | os.PathLike,
    where: str = "pre_tokenizer",
    depth: int = 0,
) -> PreTokenizer | None:
    """The pre-tokenizer a file describes at ``where`` (None: each piece is one word)."""
    if spec is None:
        return None
    kind = part_type(spec, path, where, depth)
    if kind == "Whitespace":
        return splitting(regex_matcher(WHITESPACE_PATTERN, True), "Removed", invert=True)
    if kind == "WhitespaceSplit":
        return char_splitting(SPACE, "Removed")
    if kind == "BertPreTokenizer":
        # split at whitespace (Removed), then around punctuation (Isolated): the same cut as
        # ``pretokenize.bert_pretokenize``, which the WordPiece class uses, so that one runs
        return words_of(bert_pretokenize)
    if kind == "Punctuation":
        return char_splitting(PUNCT, _behaviour(spec, path, where, "Isolated"))
    if kind == "Digits":
        individual = get(spec, "individual_digits", "bool", path, where, False)
        return char_splitting(NUMERIC, "Isolated" if individual else "Contiguous")
    if kind == "CharDelimiterSplit":
        delimiter = get(spec, "delimiter", "str", path, where)
        if len(delimiter) != 1:
            raise TokenizerFileError(
                path, f"field {where}.delimiter must be one character, got {delimiter!r}"
            )
        return char_splitting(f"[{regex.escape(delimiter)}]", "Removed")
    if kind == "Split":
        pattern = pattern_field(spec, path, where)
        if "Regex" in pattern:
            expr = from_oniguruma(pattern["Regex"])
        else:
            expr = regex.escape(pattern["String"])
        invert = get(spec, "invert", "bool", path, where, False)
        return splitting(regex_matcher(expr), _behaviour(spec, path, where, "Isolated"), invert)
    if kind == "Metaspace":
        replacement = get(spec, "replacement", "str", path, where, METASPACE)
        if len(replacement) != 1:
            raise TokenizerFileError(
                path, f"field {where}.replacement must be one character, got {replacement!r}"
            )
        if "prepend_scheme" in spec:
            scheme = get(spec, "prepend_scheme", "str", path, where)
            if scheme not in ("always", "first", "never"):
                raise TokenizerFileError(
                    path,
                    f"field {where}.prepend_scheme must be always, first or never, got {scheme!r}",
                )
        else:  # files from before tokenizers 0.19
            prefix = get(spec, "add_prefix_space", "bool", path, where, True)
            scheme = "always" if prefix else "never"
        return metaspace_step(replacement, scheme, get(spec, "split", "bool", path, where, True))
    if kind == "ByteLevel":
        return byte_level(
            get(spec, "add_prefix_space", "bool", path, where, True),
            get(spec, "use_regex", "bool", path, where, True),
        )
    if kind == "Sequence":
        steps = get(spec, "pretokenizers", "list", path, where)
        parts = [
            build(s, path, f"{where}.pretokenizers[{k}]", depth + 1) for k, s in enumerate(steps)
        ]
        return sequence([p for p in parts if p is not None])
    raise TokenizerFileError(
        path,
        f"{where}: unsupported pre-tokenizer type {kind!r} (supported: ByteLevel, Whitespace, "
        "WhitespaceSplit, BertPreTokenizer, Punctuation, Digits, Metaspace, Split, "
        "CharDelimiterSplit, Sequence)",
    )
