"""Decoders of a ``tokenizer.json`` pipeline: token strings back to text.

A decoder takes the list of token strings and returns a list of strings (the ``tokenizers``
library's ``decode_chain``), so decoders can be chained; the text is their concatenation.
Without a decoder the tokens are joined with spaces. ``BUILDERS`` lists the types read:
``ByteLevel`` (GPT-2's printable byte alphabet back to bytes, decoded as UTF-8 together),
``WordPiece`` ("##" pieces glued to the one before, others after a space), ``Metaspace`` ("▁"
back to a space, dropped in the first token), ``BPEDecoder`` (the end-of-word suffix becomes a
space), ``ByteFallback`` ("<0xXX>" runs become the text their bytes spell), ``Fuse``, ``Strip``,
``Replace`` and ``Sequence``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import regex

from .base import chain
from .fields import Part, build_part
from .normalizers import replace_pattern
from .pre_tokenizers import METASPACE, prepend_scheme, unicode_to_bytes

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
    for is_byte, run in itertools.groupby(tokens, lambda t: bool(_BYTE_TOKEN.fullmatch(t))):
        run = list(run)
        if not is_byte:
            out += run
            continue
        try:
            out.append(bytes(int(_BYTE_TOKEN.fullmatch(t)[1], 16) for t in run).decode("utf-8"))
        except UnicodeDecodeError:
            out += ["\ufffd"] * len(run)
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


def build(
    spec: dict[str, Any] | None, path: str | os.PathLike, where: str = "decoder", depth: int = 0
) -> Decoder | None:
    """The decoder a file describes at ``where`` (None: tokens joined with spaces)."""
    return build_part(spec, path, where, depth, "decoder", BUILDERS)


def _replace(p: Part) -> Decoder:
    replace = replace_pattern(p.pattern(), p("content", "str"))
    return lambda tokens: [replace(t) for t in tokens]


BUILDERS: dict[str, Callable[[Part], Decoder]] = {
    "ByteLevel": lambda p: byte_level,
    "WordPiece": lambda p: wordpiece(p("prefix", "str", "##"), p("cleanup", "bool", True)),
    "Metaspace": lambda p: metaspace(p("replacement", "str", METASPACE), prepend_scheme(p)),
    "BPEDecoder": lambda p: bpe_suffix(p("suffix", "str", "</w>")),
    "ByteFallback": lambda p: byte_fallback,
    "Fuse": lambda p: lambda tokens: ["".join(tokens)],
    "Strip": lambda p: strip(p("content", "str"), p("start", "int", 0), p("stop", "int", 0)),
    "Replace": _replace,
    "Sequence": lambda p: chain(p.steps("decoders", build)),
}
