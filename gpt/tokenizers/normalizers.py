"""Normalizers: the first step of a ``tokenizer.json`` pipeline, text in, cleaned-up text out.

``build`` turns a file's normalizer (``{"type": ..., ...}``) into a ``Normalizer`` with the
meaning the ``tokenizers`` library gives it, so files from there encode to the same ids here;
``BUILDERS`` lists the types read (docs/tokenizers.md, "Files"), anything else is refused by
name and place. SentencePiece's ``Precompiled`` map is in ``precompiled.py``.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import regex

from . import alignment, precompiled
from .alignment import Aligned
from .base import chain
from .fields import Part, build_part
from .pre_tokenizers import WHITESPACE, find_spans, from_oniguruma


@dataclass(frozen=True)
class Normalizer:
    """A normalizer: ``normalizer(text)`` gives the normalized text; ``normalizer.align`` does the
    same on an ``alignment.Aligned`` text, keeping track of where each character came from."""

    apply: Callable[[str], str]
    align: Callable[[Aligned], Aligned]

    def __call__(self, text: str) -> str:
        return self.apply(text)


def per_cluster(apply: Callable[[str], str]) -> Normalizer:
    """A normalizer that works on each character with the marks after it."""
    return Normalizer(apply, alignment.by_clusters(apply))


_MARK = regex.compile(r"\p{M}")
_SPACE = regex.compile(rf"[{WHITESPACE}]")
_LEADING_SPACE = regex.compile(rf"^[{WHITESPACE}]+")
_TRAILING_SPACE = regex.compile(rf"[{WHITESPACE}]+$")


def strip_accents(text: str) -> str:
    """Drop every combining mark (general category M)."""
    return _MARK.sub("", text)


# BERT (Devlin et al., 2019) normalizes text (drop control characters, optionally lowercase and
# strip accents, put spaces around CJK ideographs) as the ``tokenizers`` library's
# ``BertNormalizer`` defines it, so WordPiece files from there encode identically here.

_CJK = regex.compile(
    "([\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f"
    "\U0002b740-\U0002b81f\U0002b920-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f])"
)
#: Control/format/private-use characters (except tab, newline, CR), plus NUL and U+FFFD.
#: (unassigned code points are kept, as the ``tokenizers`` library keeps them)
_BERT_DROP = regex.compile(r"[\x00\ufffd]|(?![\t\n\r])[\p{Cc}\p{Cf}\p{Co}\p{Cs}]")
_MARKS = regex.compile(r"\p{Mn}")


def lower_chars(text: str) -> str:
    """Lowercase character by character, as the ``tokenizers`` library does: no final-sigma
    rule, so "ΟΔΟΣ" -> "οδοσ" where ``str.lower`` gives "οδος"."""
    return "".join(c.lower() for c in text)


def bert_normalize(
    text: str,
    clean_text: bool = True,
    handle_chinese_chars: bool = True,
    strip_accents: bool | None = None,
    lowercase: bool = False,
) -> str:
    """BERT's normalizer. ``strip_accents=None`` means "strip them when lowercasing"."""
    if clean_text:
        text = _SPACE.sub(" ", _BERT_DROP.sub("", text))
    if handle_chinese_chars:
        text = _CJK.sub(r" \1 ", text)
    if strip_accents or (strip_accents is None and lowercase):
        text = _MARKS.sub("", unicodedata.normalize("NFD", text))
    if lowercase:
        text = lower_chars(text)
    return text


def matches_of(pattern: dict[str, str]) -> Callable[[str], list[tuple[int, int]]]:
    """Where ``{"String": s}`` or ``{"Regex": r}`` matches (a file's regex under the time limit)."""
    if "String" in pattern:
        expr = regex.escape(pattern["String"]) if pattern["String"] else None
        return lambda text: [] if expr is None else find_spans(expr, text, trusted=True)
    expr = from_oniguruma(pattern["Regex"])
    return lambda text: find_spans(expr, text)


def replace_pattern(pattern: dict[str, str], content: str) -> Callable[[str], str]:
    """Replace each match of ``{"String": s}`` or ``{"Regex": r}`` by ``content``."""
    if "String" in pattern:
        literal = pattern["String"]
        return lambda text: text.replace(literal, content) if literal else text
    find = matches_of(pattern)
    return lambda text: alignment.rewrite(text, [(s, e, content) for s, e in find(text)])


def build(
    spec: dict[str, Any] | None, path: str | os.PathLike, where: str = "normalizer", depth: int = 0
) -> Normalizer | None:
    """The normalizer a file describes at ``where`` (None: the text is used as it is)."""
    return build_part(spec, path, where, depth, "normalizer", BUILDERS)


def _bert(p: Part) -> Normalizer:
    options = dict(
        clean_text=p("clean_text", "bool", True),
        handle_chinese_chars=p("handle_chinese_chars", "bool", True),
        strip_accents=p("strip_accents", "bool|null", None),
        lowercase=p("lowercase", "bool", True),
    )
    return per_cluster(lambda text: bert_normalize(text, **options))


def _replace(p: Part) -> Normalizer:
    pattern, content = p.pattern(), p("content", "str")
    return Normalizer(
        replace_pattern(pattern, content), alignment.replaced(matches_of(pattern), content)
    )


def _prepend(p: Part) -> Normalizer:
    prefix = p("prepend", "str")
    return Normalizer(lambda text: prefix + text if text else text, alignment.prepended(prefix))


def _strip(p: Part) -> Normalizer:
    left, right = p("strip_left", "bool", True), p("strip_right", "bool", True)

    def strip(text: str) -> str:
        if left:
            text = _LEADING_SPACE.sub("", text)
        if right:
            text = _TRAILING_SPACE.sub("", text)
        return text

    return Normalizer(strip, alignment.stripped(_SPACE.fullmatch, left, right))


def _precompiled(p: Part) -> Normalizer:
    where = f"{p.where}.precompiled_charsmap"
    table = precompiled.from_base64(p("precompiled_charsmap", "str"), p.path, where)
    return Normalizer(table, table.align)


def _sequence(p: Part) -> Normalizer:
    steps = p.steps("normalizers", build)
    return Normalizer(chain([s.apply for s in steps]), chain([s.align for s in steps]))


def _unicode_form(form: str) -> Callable[[Part], Normalizer]:
    return lambda p: per_cluster(lambda text: unicodedata.normalize(form, text))


BUILDERS: dict[str, Callable[[Part], Normalizer]] = {
    **{form: _unicode_form(form) for form in ("NFC", "NFD", "NFKC", "NFKD")},
    "Lowercase": lambda p: per_cluster(lower_chars),
    "StripAccents": lambda p: per_cluster(strip_accents),
    "BertNormalizer": _bert,
    "Replace": _replace,
    "Prepend": _prepend,
    "Strip": _strip,
    "Precompiled": _precompiled,
    "Sequence": _sequence,
}
