"""Seeing tokens: text coloured by token boundaries, in the terminal or as an HTML page.

Neighbouring tokens get alternating background colours; in the self-contained HTML page
(inline CSS, no scripts, no fetches) hovering over a token shows its id and vocabulary entry.
Text no token covers is left uncoloured, and tokens sharing a character (byte-level BPE cutting
an emoji in two) share it, shown once. The positions come from ``offsets.encode_with_offsets``;
``cut`` is the plain form (tokens separated by "|") that ``metrics.format_reports`` prints.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from .offsets import encode_with_offsets
from .tokenizer import Tokenizer

#: background colours for the terminal (256-colour ANSI) and the HTML page, used in turn
ANSI_COLOURS = (153, 223, 194, 218, 229, 189)
HTML_COLOURS = ("#c6dbef", "#fdd0a2", "#c7e9c0", "#fbc4d4", "#fff3b0", "#dadaeb")


def segments(tok: Tokenizer, text: str) -> list[tuple[str, list[int]]]:
    """The text cut where tokens begin and end: (piece of text, ids of the tokens covering it).
    Pieces no token covers have no ids; tokens whose place is unknown are left out."""
    placed = [(i, span) for i, span in encode_with_offsets(tok, text) if span is not None]
    out: list[tuple[str, list[int]]] = []
    pos = 0
    k = 0
    while k < len(placed):
        start, end = placed[k][1]
        ids = [placed[k][0]]
        k += 1
        # tokens sharing a character (or the same span) are shown together
        while k < len(placed) and placed[k][1][0] < end:
            ids.append(placed[k][0])
            end = max(end, placed[k][1][1])
            k += 1
        if start > pos:
            out.append((text[pos:start], []))
        start = max(start, pos)
        if end > start:
            out.append((text[start:end], ids))
        elif start == end and out and out[-1][1]:
            out[-1][1].extend(ids)  # a token covering nothing joins its neighbour
        pos = max(pos, end)
    if pos < len(text):
        out.append((text[pos:], []))
    return out


def cut(tok: Tokenizer, text: str) -> str:
    """The plain-text form: the text with "|" between tokens (no colours), e.g.
    "And| you|,| good| sir"; text no token covers is left between them as it is."""
    parts = []
    for piece, ids in segments(tok, text):
        if ids and parts and parts[-1] != "|":
            parts.append("|")
        parts.append(_visible(piece).replace("\n", ""))
        if ids:
            parts.append("|")
    return "".join(parts).strip("|")


def _visible(piece: str) -> str:
    """Whitespace made visible: a space stays, a newline is shown as ↵ before the break."""
    return piece.replace("\t", "→\t").replace("\n", "↵\n")


def to_terminal(tok: Tokenizer, text: str, ids: bool = True) -> str:
    """The text with each token on an alternating ANSI background colour; with ``ids``, a
    second block lists the ids in order."""
    parts = []
    colour = 0
    for piece, piece_ids in segments(tok, text):
        if not piece_ids:
            parts.append(piece)
            continue
        code = ANSI_COLOURS[colour % len(ANSI_COLOURS)]
        colour += 1
        for k, line in enumerate(_visible(piece).split("\n")):
            if k:
                parts.append("\n")
            if line:
                parts.append(f"\x1b[48;5;{code}m\x1b[30m{line}\x1b[0m")
    out = "".join(parts)
    if ids:
        all_ids = tok.encode(text)
        out += f"\n{len(all_ids)} tokens: {' '.join(map(str, all_ids))}"
    return out


def _html_block(name: str, tok: Tokenizer, text: str) -> str:
    spans = []
    colour = 0
    n_tokens = len(tok.encode(text))
    for piece, ids in segments(tok, text):
        shown = html.escape(_visible(piece))
        if not ids:
            spans.append(f'<span class="gap">{shown}</span>')
            continue
        title = "; ".join(f"id {i}: {tok.id_to_token(i)!r}" for i in ids)
        background = HTML_COLOURS[colour % len(HTML_COLOURS)]
        colour += 1
        spans.append(
            f'<span class="tok" style="background:{background}" '
            f'title="{html.escape(title, quote=True)}">{shown}</span>'
        )
    per_token = len(text) / n_tokens if n_tokens else 0.0
    return (
        f"<h2>{html.escape(name)} <small>{type(tok).__name__}, vocabulary {tok.vocab_size}, "
        f"{n_tokens} tokens, {per_token:.2f} characters per token</small></h2>\n"
        f'<pre class="text">{"".join(spans)}</pre>'
    )


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 60em; }}
pre.text {{ font-family: monospace; font-size: 15px; line-height: 1.9; white-space: pre-wrap;
            word-break: break-all; border: 1px solid #ddd; padding: 0.8em; }}
span.tok {{ border-radius: 3px; padding: 1px 0; }}
span.tok:hover {{ outline: 2px solid #333; }}
span.gap {{ color: #999; }}
small {{ font-weight: normal; color: #555; }}
</style></head><body>
<h1>{title}</h1>
<p>Each coloured block is one token; hover over it to see its id and its vocabulary entry.
Grey text is covered by no token.</p>
{blocks}
</body></html>
"""


def to_html(
    tokenizers: Tokenizer | Mapping[str, Tokenizer], text: str, title: str = "Tokens"
) -> str:
    """A self-contained HTML page showing how each tokenizer cuts ``text`` (one tokenizer, or
    a mapping of names to tokenizers to compare them)."""
    if isinstance(tokenizers, Tokenizer):
        tokenizers = {type(tokenizers).__name__: tokenizers}
    blocks = "\n".join(_html_block(name, tok, text) for name, tok in tokenizers.items())
    return PAGE.format(title=html.escape(title), blocks=blocks)
