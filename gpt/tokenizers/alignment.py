"""Normalizing with alignment: which characters of the original each normalized one came from.

Offsets point into the text the user gave, but tokens are cut from the *normalized* text, so
each normalizer has an aligned form working on an ``Aligned``: the text and, for each of its
characters, the (start, end) span of original characters it stands for. The rules are the
``tokenizers`` library's, one function each below.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable

Span = tuple[int, int]
#: a text and the original span of each of its characters
Aligned = tuple[str, list[Span]]


def identity(text: str, start: int = 0) -> Aligned:
    """``text`` before any normalization: character k stands for itself."""
    return text, [(start + k, start + k + 1) for k in range(len(text))]


def _starts_cluster(c: str) -> bool:
    """Whether ``c`` begins a new cluster: not a combining mark, not a Hangul vowel or final
    consonant (those compose with the characters before them)."""
    return unicodedata.combining(c) == 0 and not 0x1160 <= ord(c) <= 0x11FF


def _match_up(before: str, spans: list[Span], after: str) -> list[Span]:
    """Spans for the characters of ``after``, the normalized form of ``before``.

    First, characters found unchanged in ``before`` (in order, matched from the end) take
    their own spans ("A" + two accents -> "Á" + accent: the accent left is the second). Then
    each other character takes the first unused character of ``before`` between its matched
    neighbours ("e" + accent -> "é" gets the span of the "e"), or, with none left, the one
    before it."""
    # matched from the end: a composition absorbs the first marks, the last ones remain
    source: list[int | None] = []
    j = len(before)
    for c in reversed(after):
        k = before.rfind(c, 0, j)
        source.append(k if k >= 0 else None)
        if k >= 0:
            j = k
    source.reverse()
    used = {k for k in source if k is not None}
    previous = -1
    for i, k in enumerate(source):
        if k is not None:
            previous = k
            continue
        following = next((m for m in source[i + 1 :] if m is not None), len(before))
        free = next((m for m in range(previous + 1, following) if m not in used), None)
        if free is None:
            free = previous if previous >= 0 else min(following, len(before) - 1)
        used.add(free)
        source[i] = previous = free
    return [spans[k] for k in source]


def by_clusters(normalize: Callable[[str], str]) -> Callable[[Aligned], Aligned]:
    """The aligned form of a normalizer that works cluster by cluster (see the module
    docstring): each cluster is normalized alone. An output as long as its input keeps the
    spans one to one; one that is what its characters give one at a time gives each
    character's output that character's span ("ﬁ" -> "fi" both get the span of the "ﬁ", a
    stripped accent takes its span with it); otherwise characters were combined, and
    ``_match_up`` pairs output and input characters ("e" + accent -> "é": the span of "e")."""

    @functools.lru_cache(maxsize=4096)
    def joins(c: str) -> bool:
        """Whether ``c`` belongs to the cluster before it: a combining mark, or a character
        that normalizes to one (NFKC makes the half-width voiced mark "ﾞ" the combining U+3099,
        which composes with the "ｶ" before it into "ガ")."""
        return not _starts_cluster(c) or not _starts_cluster(normalize(c)[:1] or c)

    def align(aligned: Aligned) -> Aligned:
        text, spans = aligned
        out_text: list[str] = []
        out_spans: list[Span] = []
        k = 0
        while k < len(text):
            end = k + 1
            while end < len(text) and joins(text[end]):
                end += 1
            piece = normalize(text[k:end])
            singles = [normalize(c) for c in text[k:end]] if len(piece) != end - k else []
            if len(piece) == end - k:
                out_spans.extend(spans[k:end])
            elif "".join(singles) == piece:  # what each character gives on its own
                for single, span in zip(singles, spans[k:end]):
                    out_spans.extend([span] * len(single))
            else:  # characters combined
                out_spans.extend(_match_up(text[k:end], spans[k:end], piece))
            out_text.append(piece)
            k = end
        return "".join(out_text), out_spans

    return align


def rewrite(text: str, rewrites: list[tuple[int, int, str]]) -> str:
    """``text`` with each stretch ``(start, end, new)`` of ``rewrites`` (in order, apart)
    replaced by ``new``."""
    out, pos = [], 0
    for a, b, new in rewrites:
        out += (text[pos:a], new)
        pos = b
    out.append(text[pos:])
    return "".join(out)


def rewrite_aligned(aligned: Aligned, rewrites: list[tuple[int, int, str]], spans_of) -> Aligned:
    """``rewrite`` of an aligned text; ``spans_of(start, end, new)`` gives ``new``'s spans."""
    text, spans = aligned
    out_spans: list[Span] = []
    pos = 0
    for a, b, new in rewrites:
        out_spans += spans[pos:a]
        out_spans += spans_of(a, b, new)
        pos = b
    return rewrite(text, rewrites), out_spans + spans[pos:]


def replaced(find: Callable[[str], list[Span]], content: str) -> Callable[[Aligned], Aligned]:
    """Each match ``find`` reports is replaced by ``content``, each of whose characters gets
    the span of the match's last character, as in the ``tokenizers`` library (which counts
    them inserted after the match's characters are removed); an empty match: the span of the
    character after it, or before it at the end."""

    def align(aligned: Aligned) -> Aligned:
        text, spans = aligned

        def spans_of(start: int, end: int, new: str) -> list[Span]:
            if start < end:
                where = spans[end - 1]
            else:
                where = spans[min(start, len(spans) - 1)] if spans else (0, 0)
            return [where] * len(new)

        return rewrite_aligned(aligned, [(a, b, content) for a, b in find(text)], spans_of)

    return align


def prepended(prefix: str) -> Callable[[Aligned], Aligned]:
    """``prefix`` before non-empty text, aligned with its first character."""

    def align(aligned: Aligned) -> Aligned:
        text, spans = aligned
        if not text:
            return aligned
        return prefix + text, [spans[0]] * len(prefix) + spans

    return align


def stripped(is_space: Callable[[str], bool], left: bool, right: bool):
    """Whitespace removed from the start and/or the end."""

    def align(aligned: Aligned) -> Aligned:
        text, spans = aligned
        start, end = 0, len(text)
        while left and start < end and is_space(text[start]):
            start += 1
        while right and end > start and is_space(text[end - 1]):
            end -= 1
        return text[start:end], spans[start:end]

    return align
