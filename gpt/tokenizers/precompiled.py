"""SentencePiece's compiled character map: the ``Precompiled`` normalizer of ``tokenizer.json``.

Files converted from SentencePiece models (T5, ALBERT, XLNet, ...) carry their normalization
rules ("ﬁ" -> "fi", full-width "Ａ" -> "A", ...) as one base64 blob, ``precompiled_charsmap``
(SentencePiece's ``normalizer.cc``): a little-endian uint32, the size in bytes of a double-array
trie (darts-clone's format: uint32 units), the trie, then the replacement strings, each ended
by a NUL byte. A key (UTF-8) has as value the offset of its replacement. Walking the trie
(:meth:`CharsMap._walk`):

    pos ^= offset(unit) at the root, then for each byte c:
    pos ^= c; unit = trie[pos]; stop unless label(unit) == c;
    pos ^= offset(unit); if has_leaf(unit): the key so far has the value value(trie[pos])

    offset(u) = (u >> 10) << ((u & 2⁹) >> 6),  label(u) = u & (2³¹ | 0xFF),
    has_leaf(u) = (u >> 8) & 1,  value(u) = u & (2³¹ - 1).

Text is rewritten as the ``tokenizers`` library does it (:meth:`CharsMap.cluster_rewrites`),
with the alignment of :meth:`CharsMap.align`.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import struct

import regex

from .alignment import Aligned, rewrite, rewrite_aligned
from .base import TokenizerFileError

_CLUSTER = regex.compile(r"\X")
_SHORT = 6  # clusters below this many UTF-8 bytes are looked up whole
# Runs of characters that never join a grapheme cluster with a neighbour (Grapheme_Cluster_Break
# Other, Control or LF: no combining or spacing mark, ZWJ, Prepend mark, CR, regional indicator
# or Hangul jamo or syllable), of 32 characters or more: a shorter run costs more to take apart
# from the cluster loop than it saves (see CharsMap.rewrites).
_PLAIN = regex.compile(r"[\p{GCB=Other}\p{GCB=Control}\p{GCB=LF}]{32,}")


class CharsMap:
    """A parsed ``precompiled_charsmap``: :meth:`lookup` gives the replacement a string starts
    with, :meth:`align` rewrites a text (see the module docstring)."""

    def __init__(self, blob: bytes, source: str | os.PathLike = "<memory>"):
        if len(blob) < 4:
            raise TokenizerFileError(source, "precompiled_charsmap is shorter than its header")
        (size,) = struct.unpack_from("<I", blob)
        if size % 4 or 4 + size > len(blob) or size == 0:
            raise TokenizerFileError(
                source,
                f"precompiled_charsmap: a trie of {size} bytes does not fit its {len(blob)}-byte "
                "blob in 4-byte units",
            )
        self.trie = struct.unpack_from(f"<{size // 4}I", blob, 4)
        self.strings = blob[4 + size :]
        self.lookup = functools.lru_cache(maxsize=1 << 16)(self._lookup)

    def _walk(self, key: bytes, found: list[int]) -> bool:
        """Walk ``key`` through the trie, adding the value of each key met on the way to
        ``found``; True if the whole of ``key`` is on a path of the trie (a key may begin
        with it)."""
        trie = self.trie
        pos = _offset(trie[0])
        for c in key:
            pos ^= c
            if c == 0 or pos >= len(trie) or trie[pos] & 0x800000FF != c:
                return False
            unit = trie[pos]
            pos ^= _offset(unit)
            if (unit >> 8) & 1:
                found.append(trie[pos] & 0x7FFFFFFF)
        return True

    def _lookup(self, piece: str) -> str | None:
        """The replacement of the shortest key ``piece`` begins with, or None."""
        values: list[int] = []
        self._walk(piece.encode("utf-8"), values)
        if not values:
            return None
        start = values[0]
        end = self.strings.find(b"\0", start)
        return self.strings[start : len(self.strings) if end < 0 else end].decode("utf-8")

    def rewrites(self, text: str, plain_runs: bool = True) -> list[tuple[int, int, str]]:
        """``(start, end, new)``: each stretch of ``text`` (a cluster, or a character of one)
        that a key rewrites, in order: :meth:`cluster_rewrites` over the whole text, or with
        ``plain_runs`` (the default, same result) faster through long runs of characters that
        never join a cluster with a neighbour (:data:`_PLAIN`: most text in most scripts).
        Inside such a run each character is a grapheme cluster of its own (the run's first and
        last characters may join the text around it, so they are left to the cluster rule), and
        a cluster of one character is rewritten by that character's replacement: the run's
        rewrites are its characters that are keys, found by one regex search."""
        live = {c for c in set(text) if self._walk(c.encode("utf-8"), [])}
        if not live:
            return []
        if not plain_runs:
            return self.cluster_rewrites(text, live, 0, len(text))
        # the text's characters that are keys themselves (the regex module keeps the patterns
        # it has compiled, so a text with the same ones compiles nothing)
        keys = {c: new for c in sorted(live) if (new := self.lookup(c)) is not None}
        found = regex.compile(f"[{''.join(map(regex.escape, keys))}]").finditer if keys else None
        out: list[tuple[int, int, str]] = []
        done = 0  # the text before this is rewritten
        for run in _PLAIN.finditer(text):
            a, b = run.span()
            if a > 0 and not (text[a - 1] == "\r" and text[a] != "\n"):
                a += 1  # its first character may end the cluster before it (CR LF, a Prepend)
            if b < len(text) and text[b] != "\r":
                b -= 1  # its last character may begin a cluster with combining marks
            out += self.cluster_rewrites(text, live, done, a)
            if found is not None:
                out += [(m.start(), m.end(), keys[m[0]]) for m in found(text, a, b)]
            done = b
        return out + self.cluster_rewrites(text, live, done, len(text))

    def cluster_rewrites(self, text: str, live: set, start: int, end: int) -> list:
        """The rewrites of ``text[start:end]`` (which begins and ends at cluster boundaries),
        cluster by cluster: a cluster of fewer than 6 UTF-8 bytes that begins with a key is
        replaced whole; any other cluster character by character. ``live``: the characters
        that begin some key; a cluster with none is left as it is without a look-up."""
        out: list[tuple[int, int, str]] = []
        a = start
        for cluster in _CLUSTER.findall(text, start, end):
            b = a + len(cluster)
            if not live.isdisjoint(cluster):
                whole = None
                if len(cluster.encode("utf-8")) < _SHORT:
                    whole = self.lookup(cluster)
                if whole is not None:
                    out.append((a, b, whole))
                else:
                    for k in range(a, b):
                        new = self.lookup(text[k]) if text[k] in live else None
                        if new is not None:
                            out.append((k, k + 1, new))
            a = b
        return out

    def align(self, aligned: Aligned) -> Aligned:
        """The rewritten text, and the original span of each of its characters: the first
        characters of a replacement stand for the replaced ones one to one, extra ones share
        the span of the last, leftover replaced characters are dropped with their spans."""
        spans = aligned[1]
        return rewrite_aligned(
            aligned,
            self.rewrites(aligned[0]),
            lambda a, b, new: [spans[min(a + k, b - 1)] for k in range(len(new))],
        )

    def __call__(self, text: str) -> str:
        return rewrite(text, self.rewrites(text))


def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def from_base64(data: str, source: str | os.PathLike, where: str) -> CharsMap:
    """The charsmap of a file's ``precompiled_charsmap`` field (base64)."""
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise TokenizerFileError(source, f"field {where} is not base64") from None
    return CharsMap(blob, source)
