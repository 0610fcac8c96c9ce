"""Measuring a tokenizer on held-out text: compression (bytes and characters per token),
vocabulary use (the share seen at all, and seen only a few times), unknown tokens, and whether
``decode(encode(text))`` gives the text back (if not, where it first differs).

``report`` returns a ``TokenizerReport``; ``format_reports`` prints several side by side, with
how each one cuts a sample line of the text (``visualize.cut``).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import asdict, dataclass

from .tokenizer import Tokenizer
from .visualize import cut


@dataclass
class TokenizerReport:
    name: str
    vocab_size: int
    n_bytes: int
    n_chars: int
    n_tokens: int
    bytes_per_token: float
    chars_per_token: float
    used_share: float  # share of the vocabulary that appears in the encoded text
    rare_share: float  # share of the vocabulary seen at least once but fewer than rare_below times
    rare_below: int
    unk_rate: float  # share of tokens that are the unknown token
    reversible: bool
    first_difference: int | None  # character position of the first mismatch, if not reversible
    difference_context: str | None
    encode_mb_per_s: float
    sample: str = ""  # a line of the text with its tokens separated by "|"

    def as_dict(self) -> dict:
        return asdict(self)


def first_difference(a: str, b: str) -> int | None:
    """Index of the first position where a and b differ (None if equal)."""
    return None if a == b else len(os.path.commonprefix([a, b]))


def report(
    tok: Tokenizer, text: str, name: str | None = None, rare_below: int = 3
) -> TokenizerReport:
    """Encode ``text`` with ``tok`` and measure it (see the module docstring)."""
    t0 = time.perf_counter()
    ids = tok.encode(text)
    seconds = time.perf_counter() - t0
    decoded = tok.decode(ids)
    n_bytes = len(text.encode("utf-8"))
    n = max(len(ids), 1)
    counts = Counter(ids)
    unk = tok.unk_id
    diff = first_difference(text, decoded)
    context = None
    if diff is not None:
        context = (
            f"{text[max(0, diff - 10) : diff + 10]!r} -> {decoded[max(0, diff - 10) : diff + 10]!r}"
        )
    return TokenizerReport(
        name=name or type(tok).__name__,
        vocab_size=tok.vocab_size,
        n_bytes=n_bytes,
        n_chars=len(text),
        n_tokens=len(ids),
        bytes_per_token=n_bytes / n,
        chars_per_token=len(text) / n,
        used_share=len(counts) / tok.vocab_size,
        rare_share=sum(1 for c in counts.values() if c < rare_below) / tok.vocab_size,
        rare_below=rare_below,
        unk_rate=(counts.get(unk, 0) / n) if unk is not None else 0.0,
        reversible=diff is None,
        first_difference=diff,
        difference_context=context,
        encode_mb_per_s=n_bytes / 1e6 / max(seconds, 1e-9),
        sample=cut(tok, sample_line(text)),
    )


def sample_line(text: str, max_chars: int = 70) -> str:
    """A line of ``text`` worth showing: the first with six words or more, cut at a word end."""
    lines = [line for line in text.splitlines() if len(line.split()) >= 6] or [text[:max_chars]]
    line = lines[0]
    if len(line) > max_chars:
        line = line[: line.rfind(" ", 0, max_chars) if " " in line[:max_chars] else max_chars]
    return line


def format_reports(reports: list[TokenizerReport]) -> str:
    """A plain-text table, one row per report, then the first difference of each lossy one."""
    w = max([12, *(len(r.name) for r in reports)])
    header = (
        f"{'tokenizer':<{w}} {'vocab':>6} {'tokens':>8} {'bytes/tok':>9} {'chars/tok':>9} "
        f"{'used':>6} {'rare':>6} {'unk':>6} {'MB/s':>6}  reversible"
    )
    lines = [header, "-" * len(header)]
    notes = []
    for r in reports:
        rev = "yes" if r.reversible else f"no (at char {r.first_difference})"
        lines.append(
            f"{r.name:<{w}} {r.vocab_size:>6} {r.n_tokens:>8} {r.bytes_per_token:>9.2f} "
            f"{r.chars_per_token:>9.2f} {r.used_share:>6.1%} {r.rare_share:>6.1%} "
            f"{r.unk_rate:>6.2%} {r.encode_mb_per_s:>6.2f}  {rev}"
        )
        if not r.reversible:
            notes.append(f"  {r.name}: {r.difference_context}")
    if reports:
        lines.append(
            f"used: share of the vocabulary seen in the text; rare: share seen 1-"
            f"{reports[0].rare_below - 1} times; unk: share of tokens that are unknown"
        )
    if notes:
        lines.append("first differences (original -> decoded):")
        lines.extend(notes)
    samples = [r for r in reports if r.sample]
    if samples:
        lines.append("how each cuts a line of the text (| between tokens):")
        lines.extend(f"  {r.name:<{w}} {r.sample}" for r in samples)
    return "\n".join(lines)
