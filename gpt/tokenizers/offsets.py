"""Which characters of the text each token covers: ``encode_with_offsets``.

Every tokenizer here can say what text a token stands for (its *surface*): a byte-level BPE
token's bytes, a Unigram piece with "▁" as a space, a WordPiece piece without its "##", a
``Pipeline`` token through the file's decoder. The offsets are found by walking the text and
finding each token's surface where the previous one ended, a little further on at most (text
that no token covers, such as the spaces WordPiece drops, is skipped). Work is in UTF-8 bytes,
so a byte-level token holding half of a character still has a place; spans are then given in
characters, ``text[start:end]``, widened to whole characters.

Normalization (lowercasing, accents, NFKC, ...) can make a token's surface differ from the text;
ASCII case is forgiven, and tokens whose surface still cannot be found (and unknown tokens) are
given the text between their neighbours.
"""

from __future__ import annotations

from .base import Tokenizer
from .bpe import ByteBPE
from .pretokenize import unicode_to_bytes
from .unigram import Unigram
from .wordpiece import WordPiece

Span = tuple[int, int]
#: how many bytes of uncovered text may lie between one token and the next
MAX_GAP = 32


def surface(tok: Tokenizer, i: int) -> bytes:
    """The text token ``i`` stands for, as UTF-8 bytes (see the module docstring)."""
    if i in tok._special_by_id:
        return tok._special_by_id[i].encode("utf-8")
    if isinstance(tok, ByteBPE):
        return tok.vocab[i]
    token = tok.itos[i]
    if isinstance(tok, Unigram):
        return token.replace(tok.replacement, " ").encode("utf-8")
    if isinstance(tok, WordPiece):
        return token.removeprefix(tok.prefix).encode("utf-8")
    if tok.kind == "pipeline":
        spelling = tok.spelling
        if spelling.byte_level:
            table = unicode_to_bytes()
            if all(c in table for c in token):
                return bytes(table[c] for c in token)
        if spelling.space:
            token = token.replace(spelling.space, " ")
        if spelling.prefix:
            token = token.removeprefix(spelling.prefix)
        if spelling.suffix:
            token = token.removesuffix(spelling.suffix)
    return token.encode("utf-8")


def encode_with_offsets(
    tok: Tokenizer, text: str, ids: list[int] | None = None
) -> list[tuple[int, Span | None]]:
    """``(id, (start, end))`` for each token of ``text`` (``tok.encode(text)`` unless ``ids``
    are given), ``text[start:end]`` being what the token covers.

    A run of tokens whose text cannot be found (unknown tokens, text changed by normalizing)
    shares the span of the text between its neighbours, or gets ``None`` if that is empty.
    """
    if ids is None:
        ids = tok.encode(text)
    data = text.encode("utf-8")
    lower = data.lower()  # ASCII only, so byte positions stay the same
    char_at = _char_index(text)
    spans: list[Span | None] = []
    pos = 0
    unk = tok.unk_id
    for k, i in enumerate(ids):
        chunk_start = k == 0 or (ids[k - 1] in tok._special_by_id and ids[k - 1] != unk)
        # an unknown token is placed by its neighbours, unless its text is there literally
        s = surface(tok, i)
        found, pos = _find(data, lower, s, pos, chunk_start, literal=i == unk)
        spans.append(found)
    _fill_gaps(spans, data)
    return [
        (i, None if sp is None else (char_at[sp[0]], _char_end(char_at, sp[1])))
        for i, sp in zip(ids, spans)
    ]


def _fill_gaps(spans: list[Span | None], data: bytes) -> None:
    """Give each run of unfound tokens the text between its neighbours (trimmed of whitespace,
    unless that is all there is)."""
    k = 0
    while k < len(spans):
        if spans[k] is not None:
            k += 1
            continue
        run_end = k
        while run_end < len(spans) and spans[run_end] is None:
            run_end += 1
        gap_start = spans[k - 1][1] if k > 0 else 0
        gap_end = spans[run_end][0] if run_end < len(spans) else len(data)
        start, end = gap_start, gap_end
        while start < end and data[start : start + 1].isspace():
            start += 1
        while end > start and data[end - 1 : end].isspace():
            end -= 1
        if end == start:  # only whitespace between the neighbours: then that is it
            start, end = gap_start, gap_end
        if end > start:
            for j in range(k, run_end):
                spans[j] = (start, end)
        k = run_end


def _find(
    data: bytes, lower: bytes, s: bytes, pos: int, chunk_start: bool, literal: bool = False
) -> tuple[Span | None, int]:
    """Where ``s`` next occurs, and where the search goes on from: right at ``pos`` (exactly, or
    without a leading space that the tokenizer added), else at most MAX_GAP bytes further on,
    ASCII case forgiven (unless ``literal``); the earliest such place wins. ``chunk_start``:
    ``pos`` starts the text or follows a special token, where a tokenizer may have put a space
    of its own (Unigram's "▁"); such a space covers nothing, and is reported on the character
    after it, as the ``tokenizers`` library does."""
    bare = s.lstrip(b" ")
    for candidate in (s, bare):
        if candidate and data.startswith(candidate, pos):
            return (pos, pos + len(candidate)), pos + len(candidate)
    if not bare and chunk_start:
        end = pos + 1
        while end < len(data) and data[end] & 0xC0 == 0x80:  # to the end of the character
            end += 1
        return (pos, min(end, len(data))), pos
    candidates = [(s, data)] if literal else [(s, data), (bare, data), (s.lower(), lower)]
    if not literal:
        candidates.append((bare.lower(), lower))
    best: Span | None = None
    for candidate, haystack in candidates:
        if not candidate:
            continue
        k = haystack.find(candidate, pos, pos + MAX_GAP + len(candidate))
        if k >= 0 and (best is None or k < best[0]):
            best = (k, k + len(candidate))
    return best, pos if best is None else best[1]


def _char_index(text: str) -> list[int]:
    """For each byte offset of the UTF-8 text (and its end), the index of the character that
    byte belongs to."""
    out = []
    for k, c in enumerate(text):
        out.extend([k] * len(c.encode("utf-8")))
    out.append(len(text))
    return out


def _char_end(char_at: list[int], end: int) -> int:
    """A byte end offset as a character end offset, widened to the end of a split character."""
    if end == 0:
        return 0
    return char_at[end - 1] + 1
