"""Which characters of the text each token covers: ``encode_with_offsets``.

Every tokenizer here can say what text a token stands for (its *surface*): a byte-level BPE
token's bytes, a Unigram piece with "▁" as a space, a WordPiece piece without its "##", as
the file's ``Spelling`` says. The offsets are found by walking the text and
finding each token's surface where the previous one ended, a little further on at most (text
that no token covers, such as the spaces WordPiece drops, is skipped). Work is in UTF-8 bytes,
so a byte-level token holding half of a character still has a place; spans are then given in
characters, ``text[start:end]``, widened to whole characters.

Tokens are cut from the *normalized* text (lowercased, accents stripped, NFKC, ...), so the
search runs there, and the spans found are carried back to the original characters by the
normalizer's alignment (``alignment.py``). Tokens whose surface still cannot be found (and
unknown tokens) are given the text between their neighbours.

The search does not cross an added (special) token: the encoder cuts the text at those first
(``segments``), so each one's span is where it was cut, and the tokens of each stretch between
them are looked for in that stretch alone. An unknown token beside an added one that spells it
("<unk>") therefore cannot be confused with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import regex

from .pre_tokenizers import WHITESPACE, unicode_to_bytes
from .tokenizer import Tokenizer

Span = tuple[int, int]
_BYTE_TOKEN = regex.compile(r"<0x([0-9A-F]{2})>")
#: the characters of Unicode's White_Space, one by one (for ``str.strip``)
WHITESPACE_CHARS = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + "\u2028\u2029\u202f\u205f\u3000"
)
_TRIM = regex.compile(rf"(?s)[{WHITESPACE}]*(.*?)[{WHITESPACE}]*")
#: how many bytes of uncovered text may lie between one token and the next
MAX_GAP = 128


def surface(tok: Tokenizer, i: int) -> bytes:
    """The text token ``i`` stands for, as UTF-8 bytes (see the module docstring)."""
    byte = _BYTE_TOKEN.fullmatch(tok.itos[i])
    if byte:  # a byte-fallback token stands for one byte
        return bytes([int(byte.group(1), 16)])
    if i in tok._special_by_id:
        return tok._special_by_id[i].encode("utf-8")
    token = tok.itos[i]
    spelling = spelling_of(tok)
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

    A run of tokens whose text cannot be found (unknown tokens, mostly) is placed in the text
    between its neighbours (``_fill_gaps``); ``None`` if there is nothing there.
    """
    if ids is None:
        ids = tok.encode(text)
    original = text
    text, origin = tok.normalize_aligned(text)  # the search runs in the text the model saw
    spans: list[Span | None] = []
    for start, end, piece, added in _pieces(tok, original, ids):
        if added:  # an added token is where the text was cut for it
            spans.append((start, end))
            continue
        found = _search(tok, text[start:end], piece)
        spans.extend(None if sp is None else (sp[0] + start, sp[1] + start) for sp in found)
    if spelling_of(tok).trim_offsets:
        _trim(tok, ids, spans)
    out: list[tuple[int, Span | None]] = []
    for i, sp in zip(ids, spans):
        if sp is None:
            out.append((i, None))
        elif sp[1] > sp[0]:  # back to the characters of the original text
            out.append((i, (origin[sp[0]][0], origin[sp[1] - 1][1])))
        else:
            at = origin[sp[0]][0] if sp[0] < len(origin) else len(original)
            out.append((i, (at, at)))
    return out


def _pieces(
    tok: Tokenizer, original: str, ids: list[int]
) -> list[tuple[int, int, list[int], bool]]:
    """The stretches of the normalized text whose tokens are looked for apart, with their ids
    and whether they are an added token: each such token and each stretch between them as the
    encoder cut them (``segments``), when ``ids`` are those it gives (not truncated or padded);
    else the whole text, searched as one."""
    segments = tok.segments(original)
    if [i for _, _, piece, _ in segments for i in piece] == ids:
        return segments
    return [(0, len(tok.normalize_aligned(original)[0]), ids, False)]


def _search(tok: Tokenizer, text: str, ids: list[int]) -> list[Span | None]:
    """Where each token of ``ids`` lies in ``text`` (the normalized text, or a stretch of it
    that these tokens cover): found by its surface where the previous one ended, and the
    tokens not found placed between their neighbours (``_fill_gaps``)."""
    data = text.encode("utf-8")
    lower = data.lower()  # ASCII only, so byte positions stay the same
    char_at = _char_index(text)
    spans: list[Span | None] = []
    cursors: list[int] = []  # where the search stood after each token, in characters
    pos = 0
    unk = tok.unk_id
    byte_level = spelling_of(tok).byte_level
    # an unknown token is placed by its neighbours, unless its text is there literally and the
    # pre-tokenizer leaves that text whole (else the text is several words, none of them it)
    unk_whole = unk is not None and (
        unk in {t.id for t in tok.added} or len(_words(tok, surface(tok, unk).decode("utf-8"))) <= 1
    )
    # where the model makes a whole word unknown (WordPiece, WordLevel), the token after an
    # unknown one starts a word: it is looked for only there, not inside the unknown word
    starts: list[int] | None = None
    unk_run = 0  # unknown tokens just before this one that were not found
    for k, i in enumerate(ids):
        # an added unknown token starts a chunk only where it was found as its text
        after_added = k > 0 and ids[k - 1] in tok._special_by_id
        chunk_start = k == 0 or (after_added and (ids[k - 1] != unk or spans[-1] is not None))
        s = surface(tok, i)
        if unk_run and i != unk and _unk_is_a_word(tok):
            if starts is None:
                starts = [len(text[:a].encode("utf-8")) for a, _ in _word_spans(tok, text) or []]
            later = [b for b in starts if b >= pos][unk_run:]  # past the unknown words
            at = next((b for b in later if data.startswith(s, b)), -1)
            if 0 <= at <= pos + MAX_GAP:
                spans.append((char_at[at], _char_end(char_at, at + len(s))))
                pos = at + len(s)
                cursors.append(char_at[pos])
                unk_run = 0
                continue
        # a "▁" that was in the text itself (not a space) is matched as it is spelled (a
        # byte-level token stands for its bytes only)
        spelled = s if byte_level else tok.itos[i].encode("utf-8")
        at = data.find(spelled, pos, pos + MAX_GAP + len(spelled)) if spelled != s else -1
        found, after = _find(data, lower, s, pos, chunk_start, literal=i == unk, whole=unk_whole)
        if i == unk and found is not None and found[0] > pos:
            # the unknown token's text after whitespace: only if the pre-tokenizer drops that
            # whitespace (else the whitespace is a token, maybe this one)
            if _words(tok, text[char_at[pos] : char_at[found[0]]]):
                found, after = None, pos
        if at >= 0 and (found is None or at <= found[0]):
            found, after = (at, at + len(spelled)), at + len(spelled)
        unk_run = unk_run + 1 if i == unk and found is None else 0
        pos = after
        spans.append(None if found is None else (char_at[found[0]], _char_end(char_at, found[1])))
        cursors.append(char_at[pos])
    unk_text = surface(tok, unk).decode("utf-8") if unk_whole else None
    _fill_gaps(tok, spans, cursors, text, unk_text)
    if unk is not None and _fuses_unknown(tok):
        _widen_unknown(tok, ids, spans, cursors, text, unk)
    return spans


def _widen_unknown(
    tok: Tokenizer,
    ids: list[int],
    spans: list[Span | None],
    cursors: list[int],
    text: str,
    unk: int,
) -> None:
    """Where the model fuses a run of unknown characters into the unknown token, and that token
    was found as its own text (the vocabulary's "<unk>" piece, which the model matches like any
    other), the unknown characters beside it in the same word are part of the same token: its
    span takes the characters of its word from where the search stood after the token before
    it (a Metaspace "▁" put in front of the word covers no character, though its span is the
    first) to the next token's span."""
    words = None
    for k, i in enumerate(ids):
        if i != unk or spans[k] is None:
            continue
        if words is None:
            words = _word_spans(tok, text) or []
        start, end = spans[k]
        word = next(((a, b) for a, b in words if a <= start and end <= b), None)
        if word is None:
            continue
        before = cursors[k - 1] if k else 0
        after = next((sp[0] for sp in spans[k + 1 :] if sp is not None), len(text))
        spans[k] = (max(word[0], min(before, start)), min(word[1], max(after, end)))


def _fuses_unknown(tok: Tokenizer) -> bool:
    """Whether ``tok``'s model makes a run of unknown characters one unknown token (Unigram,
    and BPE with ``fuse_unk``)."""
    model = tok.file_data["model"]
    return model.get("type") == "Unigram" or bool(model.get("fuse_unk"))


def _fill_gaps(
    tok: Tokenizer,
    spans: list[Span | None],
    cursors: list[int],
    text: str,
    unk_text: str | None,
) -> None:
    """Place each run of unfound tokens in the text between its neighbours: cut that text into
    as many units as the run has tokens if possible, else give each token all of it.

    The units tried, in order: the words ``tok``'s pre-tokenizer cuts that text into (an unknown
    token stands for a whole word in WordPiece and WordLevel, and for a run of unknown
    characters of one word in BPE and Unigram with ``fuse_unk``, which is the whole word when
    no known piece is in it); the characters of those words (BPE without ``fuse_unk``: one
    unknown token per character); then whitespace-separated words, characters other than
    whitespace, and characters (the unknown token's own spelling, where the text holds it,
    counts as one unit)."""
    k = 0
    while k < len(spans):
        if spans[k] is not None:
            k += 1
            continue
        run_end = k
        while run_end < len(spans) and spans[run_end] is None:
            run_end += 1
        gap_start = cursors[k - 1] if k > 0 else 0
        gap_end = spans[run_end][0] if run_end < len(spans) else len(text)
        gap_end = max(gap_start, gap_end)
        n = run_end - k
        places = _word_units(tok, text, gap_start, gap_end, n, unk_text)
        if places is None:
            places = _units(text, gap_start, gap_end, n, unk_text)
        if places is not None:
            spans[k:run_end] = places
        k = run_end


def _words(tok: Tokenizer, text: str) -> list[str]:
    """The words ``tok``'s pre-tokenizer cuts ``text`` (normalized, not the start of the input)
    into, spelled as in ``text`` (a Metaspace "▁" back to the space it stands for)."""
    space = spelling_of(tok).space
    words = tok.words(text, False)
    return [w.replace(space, " ") for w in words] if space else words


def _unk_is_a_word(tok: Tokenizer) -> bool:
    """Whether ``tok``'s model makes a whole word its unknown token (WordPiece, WordLevel)."""
    return tok.file_data["model"].get("type") in ("WordPiece", "WordLevel")


def _word_spans(tok: Tokenizer, text: str) -> list[Span] | None:
    """Where the words ``tok``'s pre-tokenizer cuts ``text`` into lie in it, or None if they are
    spelled otherwise than the text (ByteLevel) and cannot be found."""
    if spelling_of(tok).byte_level:
        return None
    words: list[Span] = []
    pos = 0
    for w in _words(tok, text):
        # a Metaspace "▁" the pre-tokenizer put in front of the text stands for no character
        at = text.find(w, pos)
        if at < 0 and w.startswith(" "):
            w = w[1:]
            at = text.find(w, pos)
        if at < 0:
            return None
        if w:
            words.append((at, at + len(w)))
        pos = at + len(w)
    return words


def _word_units(
    tok: Tokenizer, text: str, start: int, end: int, n: int, unk_text: str | None
) -> list[Span] | None:
    """``n`` places in ``text[start:end]``: its words under ``tok``'s pre-tokenizer, or the
    characters of those words, if there are ``n`` of them (see ``_fill_gaps``); else None. The
    unknown token's own text (``unk_text``, where it is an added token) is one unit."""
    if end <= start:
        return None
    literal: list[Span] = []  # the added unknown token's occurrences
    parts: list[Span] = []  # the text between them
    pos = start
    for m in regex.finditer(regex.escape(unk_text), text[:end], pos=start) if unk_text else []:
        parts.append((pos, m.start()))
        literal.append(m.span())
        pos = m.end()
    parts.append((pos, end))
    words: list[Span] = []
    for a, b in parts:
        spans = _word_spans(tok, text[a:b])
        if spans is None:
            return None
        words.extend((a + x, a + y) for x, y in spans)
    chars = [(k, k + 1) for a, b in words for k in range(a, b)]
    for units in (words, chars):
        if len(units) + len(literal) == n:
            return sorted(units + literal)
    return None


def _units(text: str, start: int, end: int, n: int, unk_text: str | None) -> list[Span] | None:
    """``n`` places for ``n`` unfound tokens in ``text[start:end]`` (see ``_fill_gaps``)."""
    literal = regex.escape(unk_text) + "|" if unk_text else ""
    gap = text[start:end]
    inner = _TRIM.fullmatch(gap)  # (Unicode's White_Space: str.strip also takes \x1c-\x1f)
    trimmed, offset = inner.group(1), start + inner.start(1)
    for piece, base, pattern in (
        (trimmed, offset, rf"{literal}[^{WHITESPACE}]+"),
        (trimmed, offset, rf"{literal}[^{WHITESPACE}]"),
        (trimmed, offset, rf"(?s){literal}."),
        (gap, start, rf"(?s){literal}."),
    ):
        units = [(m.start() + base, m.end() + base) for m in regex.finditer(pattern, piece)]
        if len(units) == n:
            return units
    if not gap:
        return None
    whole = (offset, offset + len(trimmed)) if trimmed else (start, end)
    return [whole] * n


def _trim(tok: Tokenizer, ids: list[int], spans: list[Span | None]) -> None:
    """The ByteLevel post-processor's ``trim_offsets``: a token's leading and trailing spaces
    ("Ġ" or whitespace in its spelling) are left out of its span, except a single leading space
    of the first token when the processor says it added it (``add_prefix_space``)."""
    spelling = spelling_of(tok)
    byte_level = spelling.byte_level
    for k, (i, sp) in enumerate(zip(ids, spans)):
        if sp is None:
            continue
        if byte_level:  # "Ġ" counts; a newline, spelled "Ċ", does not
            token, blank = surface(tok, i).decode("utf-8", "replace"), " "
        else:
            token, blank = tok.itos[i], WHITESPACE_CHARS
        lead = len(token) - len(token.lstrip(blank))
        trail = len(token) - len(token.rstrip(blank))
        start, end = sp
        if lead and not ((k == 0 or start == 0) and spelling.added_prefix_space and lead == 1):
            start = min(start + lead, end)
        if trail and end >= trail:
            end = max(end - trail, start)
        spans[k] = (start, end)


def _find(
    data: bytes,
    lower: bytes,
    s: bytes,
    pos: int,
    chunk_start: bool,
    literal: bool = False,
    whole: bool = True,
) -> tuple[Span | None, int]:
    """Where ``s`` next occurs, and where the search goes on from: right at ``pos`` (exactly, or
    without a leading space that the tokenizer added), else at most MAX_GAP bytes further on,
    ASCII case forgiven; the earliest such place wins. ``chunk_start``:
    ``pos`` starts the text or follows a special token, where a tokenizer may have put a space
    of its own (Unigram's "▁"); such a space covers nothing, and is reported on the character
    after it, as the ``tokenizers`` library does. ``literal``: only right at ``pos``, past
    whitespace (for an unknown token, whose text may be there as an added token, or as a word
    the model maps to its id: not found at all unless ``whole``, the pre-tokenizer keeping its
    text as one word)."""
    if literal and not whole:
        return None, pos
    bare = s.lstrip(b" ")
    for candidate in (s, bare):
        if candidate and data.startswith(candidate, pos):
            return (pos, pos + len(candidate)), pos + len(candidate)
    if not bare and chunk_start:
        end = pos + 1
        while end < len(data) and data[end] & 0xC0 == 0x80:  # to the end of the character
            end += 1
        return (pos, min(end, len(data))), pos
    if literal:  # only after whitespace: an unknown token's spelling is no text to look for
        start = pos
        while start < len(data) and data[start] in b" \t\n\r\x0b\x0c":
            start += 1
        if s and data.startswith(s, start):
            return (start, start + len(s)), start + len(s)
        return None, pos
    # The exact spelling first; ASCII case forgiven only if it is nowhere near (else a known
    # "o" would take the "O" an unknown token stands for, before its own "o").
    best: Span | None = None
    for candidates in ([(s, data), (bare, data)], [(s.lower(), lower), (bare.lower(), lower)]):
        for candidate, haystack in candidates:
            if not candidate:
                continue
            k = haystack.find(candidate, pos, pos + MAX_GAP + len(candidate))
            if k >= 0 and (best is None or k < best[0]):
                best = (k, k + len(candidate))
        if best is not None:
            break
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


@dataclass(frozen=True)
class Spelling:
    """How a file's tokens spell the text they stand for, as far as offsets need to know: in
    GPT-2's printable byte alphabet ("Ġ" for a space), with a character standing for a space
    ("▁"), with a prefix on word-continuing pieces ("##") or a suffix on word-final ones
    ("</w>"); and whether the post-processor trims spaces off offsets."""

    byte_level: bool = False
    space: str = ""
    prefix: str = ""
    suffix: str = ""
    #: the post-processor trims spaces off offsets (ByteLevel, RobertaProcessing
    #: ``trim_offsets``), except the one it added before the first token (``add_prefix_space``)
    trim_offsets: bool = False
    added_prefix_space: bool = False

    @classmethod
    def of(cls, data: dict[str, Any]) -> Spelling:
        pre = json.dumps(data.get("pre_tokenizer"))
        model = data.get("model") or {}
        space = ""
        if '"Metaspace"' in pre:
            space = _find_key(data.get("pre_tokenizer"), "replacement") or "\u2581"
        post = data.get("post_processor")
        steps = (post.get("processors") or []) if _type(post) == "Sequence" else [post]
        trimming = [
            s
            for s in steps
            if _type(s) in ("ByteLevel", "RobertaProcessing")
            and s.get("trim_offsets", True) is True
        ]
        return cls(
            byte_level='"ByteLevel"' in pre,
            space=space,
            prefix=model.get("continuing_subword_prefix") or "",
            suffix=model.get("end_of_word_suffix") or "",
            trim_offsets=bool(trimming),
            added_prefix_space=any(s.get("add_prefix_space", True) is True for s in trimming),
        )


def spelling_of(tok: Tokenizer) -> Spelling:
    """``tok``'s spelling, read from its file once."""
    if "_spelling" not in tok.__dict__:
        tok._spelling = Spelling.of(tok.file_data)
    return tok._spelling


def _type(spec: Any) -> Any:
    return spec.get("type") if isinstance(spec, dict) else None


def _find_key(spec: Any, key: str, depth: int = 0) -> Any:
    """The first value of ``key`` in a JSON value, looking at most 64 levels deep."""
    if depth > 64:
        return None
    if isinstance(spec, dict):
        if key in spec:
            return spec[key]
        spec = list(spec.values())
    if isinstance(spec, list):
        for value in spec:
            found = _find_key(value, key, depth + 1)
            if found is not None:
                return found
    return None
