"""Which characters of the text each token covers: ``encode_with_offsets``.

The offsets are carried through the pipeline as the ``tokenizers`` library carries them
(docs/tokenizers.md, "Seeing tokens"): the normalizer's alignment (``alignment.py``), each
pre-tokenizer piece's places (``pre_tokenizers.Piece``), and the bytes of its word each token
is made of (``models.Model.tokens``). A token's span runs from the original span of its first
character to that of its last; ``trim_offsets`` is applied after (``_trim``).
"""

from __future__ import annotations

from typing import Any

from .tokenizer import Tokenizer

Span = tuple[int, int]
#: the characters of Unicode's White_Space, one by one (for ``str.strip``), and GPT-2's
#: printable space "Ġ": what ``trim_offsets`` trims
TRIMMED = (
    "Ġ\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + "\u2028\u2029\u202f\u205f\u3000"
)


def encode_with_offsets(tok: Tokenizer, text: str) -> list[tuple[int, Span]]:
    """``(id, (start, end))`` for each token of ``tok.encode(text)``, ``text[start:end]`` being
    what the token covers (see the module docstring)."""

    def tokens(part: str, first: bool) -> list[tuple[int, int, int]]:
        """The tokens of a stretch of normalized text, with their places in it."""
        pieces = [(part, first, list(range(len(part))))]
        if tok.pre_tokenizer is not None:
            pieces = tok.pre_tokenizer(pieces)
        out = []
        for word, _, where in pieces:
            char_of = [k for k, c in enumerate(word) for _ in c.encode("utf-8")]
            for i, a, b in tok.model.tokens(word):
                first_char = char_of[min(a, len(char_of) - 1)]
                last_char = char_of[min(max(b - 1, a), len(char_of) - 1)]
                out.append((i, where[first_char], where[last_char] + 1))
        return out

    placed: list[tuple[int, int, int]] = []  # (id, start, end) in the normalized text
    for start, end, found, added in tok._segments(text, "all", tokens):
        if added:
            placed.append((found[0], start, end))
        else:
            placed += [(i, start + a, start + b) for i, a, b in found]
    spans = [(a, b) for _, a, b in placed]
    trim = _trimming(tok.file_data.get("post_processor"))
    if trim is not None:
        _trim(tok, [i for i, _, _ in placed], spans, added_prefix_space=trim)
    _, origin = tok.normalize_aligned(text)
    out = []
    for (i, _, _), (a, b) in zip(placed, spans):
        if b > a:  # back to the characters of the original text
            out.append((i, (origin[a][0], origin[b - 1][1])))
        else:  # trimmed to nothing: where it was
            at = origin[a][0] if a < len(origin) else len(text)
            out.append((i, (at, at)))
    return out


def _trimming(post: Any) -> bool | None:
    """Whether the post-processor trims spaces off offsets (ByteLevel, RobertaProcessing
    ``trim_offsets``; None if not), and if so whether it keeps the one it added before the
    first token (``add_prefix_space``)."""
    steps = (post.get("processors") or []) if _type(post) == "Sequence" else [post]
    trimming = [
        s
        for s in steps
        if _type(s) in ("ByteLevel", "RobertaProcessing") and s.get("trim_offsets", True) is True
    ]
    if not trimming:
        return None
    return any(s.get("add_prefix_space", True) is True for s in trimming)


def _type(spec: Any) -> Any:
    return spec.get("type") if isinstance(spec, dict) else None


def _trim(tok: Tokenizer, ids: list[int], spans: list[Span], added_prefix_space: bool) -> None:
    """``trim_offsets``: a token's leading and trailing spaces ("Ġ" or whitespace in its
    spelling; a newline, spelled "Ċ", is not one) are left out of its span, except a single
    leading space of the first token when the processor says it added it."""
    for k, (i, (start, end)) in enumerate(zip(ids, spans)):
        token = tok.itos[i]
        lead = len(token) - len(token.lstrip(TRIMMED))
        trail = len(token) - len(token.rstrip(TRIMMED))
        if lead and not ((k == 0 or start == 0) and added_prefix_space and lead == 1):
            start = min(start + lead, end)
        if trail and end >= trail:
            end = max(end - trail, start)
        spans[k] = (start, end)
