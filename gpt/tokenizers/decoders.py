"""Decoders of a ``tokenizer.json`` pipeline: token strings back to text.

A decoder takes the list of token strings and returns a list of strings (the ``tokenizers``
library's ``decode_chain``), so decoders can be chained; the text is their concatenation.
Without a decoder the tokens are joined with spaces. The types ``build`` reads:

* ``ByteLevel``: every token's characters back to bytes (GPT-2's printable byte alphabet), the
  bytes of all tokens decoded as UTF-8 together (invalid bytes become "�").
* ``WordPiece``: a token starting with the prefix ("##") glues to the one before it, others get
  a space before them; ``cleanup`` then removes spaces before punctuation and contractions.
* ``Metaspace``: "▁" back to a space; in the first token, where the pre-tokenizer put one, every
  "▁" is removed instead (unless ``prepend_scheme`` is "never").
* ``BPEDecoder``: the end-of-word suffix ("</w>") becomes a space (nothing after the last token).
* ``ByteFallback``: runs of "<0xXX>" tokens become the text their bytes spell.
* ``Fuse``: all tokens into one string. ``Strip``: remove up to ``start``/``stop`` copies of a
  character from each token's ends. ``Replace``: a pattern replaced in each token.
* ``Sequence``: the listed decoders one after another.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import regex

from .base import TokenizerFileError
from .fields import get, part_type, pattern_field
from .normalizers import replace_pattern
from .pre_tokenizers import unicode_to_bytes

Decoder = Callable[[list[str]], list[str]]

#: a byte token: "<0x" two hex digits ">", read as the library reads them (Rust's
#: ``u8::from_str_radix``: lowercase digits too, and a "+" sign before a single digit)
_BYTE_TOKEN = regex.compile(r"<0x(\+[0-9A-Fa-f]|[0-9A-Fa-f]{2})>")


def byte_level(tokens: list[str]) -> list[str]:
    table = unicode_to_bytes()
    data = bytearray()
    for t in tokens:
        if all(c in table for c in t):
            data.extend(table[c] for c in t)
        else:  # not a byte-level token (an added token, say): its own UTF-8
            data.extend(t.encode("utf-8"))
    return [data.decode("utf-8", errors="replace")]


#: WordPiece's cleanup: in this order, as the tokenizers library does it
CLEANUP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def cleanup(text: str) -> str:
    for old, new in CLEANUP:
        text = text.replace(old, new)
    return text


def wordpiece(prefix: str, clean: bool) -> Decoder:
    def decode(tokens: list[str]) -> list[str]:
        out = []
        for k, t in enumerate(tokens):
            if k > 0:
                t = t[len(prefix) :] if t.startswith(prefix) else " " + t
            out.append(cleanup(t) if clean else t)
        return out

    return decode


def metaspace(replacement: str, prepend_scheme: str) -> Decoder:
    def decode(tokens: list[str]) -> list[str]:
        # as the library does it: the first token loses every "▁" (not only a leading one),
        # and a space that was a space already stays
        return [
            t.replace(replacement, "" if k == 0 and prepend_scheme != "never" else " ")
            for k, t in enumerate(tokens)
        ]

    return decode


def bpe_suffix(suffix: str) -> Decoder:
    def decode(tokens: list[str]) -> list[str]:
        last = len(tokens) - 1
        return [t.replace(suffix, "" if k == last else " ") for k, t in enumerate(tokens)]

    return decode


def byte_fallback(tokens: list[str]) -> list[str]:
    out: list[str] = []
    pending = bytearray()  # bytes of the current run of <0xXX> tokens
    count = 0

    def flush() -> None:
        nonlocal count
        if count:
            try:
                out.append(pending.decode("utf-8"))
            except UnicodeDecodeError:
                out.extend("\ufffd" for _ in range(count))
            pending.clear()
            count = 0

    for t in tokens:
        m = _BYTE_TOKEN.fullmatch(t)
        if m:
            pending.append(int(m.group(1), 16))
            count += 1
        else:
            flush()
            out.append(t)
    flush()
    return out


def strip(content: str, start: int, stop: int) -> Decoder:
    def strip_one(t: str) -> str:
        for _ in range(start):
            if not t.startswith(content):
                break
            t = t[len(content) :]
        for _ in range(stop):
            if not t.endswith(content):
                break
            t = t[: -len(content)]
        return t

    return lambda tokens: [strip_one(t) for t in tokens]


def sequence(steps: list[Decoder]) -> Decoder:
    def decode(tokens: list[str]) -> list[str]:
        for step in steps:
            tokens = step(tokens)
        return tokens

    return decode


def build(
    spec: dict[str, Any] | None, path: str | os.PathLike, where: str = "decoder", depth: int = 0
) -> Decoder | None:
    """The decoder a file describes at ``where`` (None: tokens joined with spaces)."""
    if spec is None:
        return None
    kind = part_type(spec, path, where, depth)
    if kind == "ByteLevel":
        return byte_level
    if kind == "WordPiece":
        return wordpiece(
            get(spec, "prefix", "str", path, where, "##"),
            get(spec, "cleanup", "bool", path, where, True),
        )
    if kind == "Metaspace":
        if "prepend_scheme" in spec:
            scheme = get(spec, "prepend_scheme", "str", path, where)
        else:
            scheme = (
                "always" if get(spec, "add_prefix_space", "bool", path, where, True) else "never"
            )
        return metaspace(get(spec, "replacement", "str", path, where, "\u2581"), scheme)
    if kind == "BPEDecoder":
        return bpe_suffix(get(spec, "suffix", "str", path, where, "</w>"))
    if kind == "ByteFallback":
        return byte_fallback
    if kind == "Fuse":
        return lambda tokens: ["".join(tokens)]
    if kind == "Strip":
        return strip(
            get(spec, "content", "str", path, where),
            get(spec, "start", "int", path, where, 0),
            get(spec, "stop", "int", path, where, 0),
        )
    if kind == "Replace":
        replace = replace_pattern(
            pattern_field(spec, path, where), get(spec, "content", "str", path, where)
        )
        return lambda tokens: [replace(t) for t in tokens]
    if kind == "Sequence":
        steps = get(spec, "decoders", "list", path, where)
        parts = [build(s, path, f"{where}.decoders[{k}]", depth + 1) for k, s in enumerate(steps)]
        return sequence([p for p in parts if p is not None])
    raise TokenizerFileError(
        path,
        f"{where}: unsupported decoder type {kind!r} (supported: ByteLevel, WordPiece, Metaspace, "
        "BPEDecoder, ByteFallback, Fuse, Strip, Replace, Sequence)",
    )
