"""An interactive attention view as one self-contained HTML file (no network, no libraries):
the prompt's tokens in a row; hover a token to shade every earlier token by how much the chosen
head attends to it from there (click to pin), and pick the head from a list. The static PNGs
are in :mod:`gpt.plots` (``attention_pattern``).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
#tokens span {{ display: inline-block; margin: 2px; padding: 2px 4px; border: 1px solid #ccc;
  border-radius: 3px; font-family: monospace; white-space: pre; cursor: pointer; }}
#tokens span.query {{ outline: 2px solid #d33; }}
#info {{ color: #555; margin: .5em 0; }}
</style></head>
<body>
<h3>{title}</h3>
<label>head <select id="head"></select></label>
<div id="info">hover a token to see what it attends to; click to pin it</div>
<div id="tokens"></div>
<script>
const data = {data};
const tokens = data.tokens, patterns = data.patterns;   // patterns[head][query][key]
const headSel = document.getElementById("head"), box = document.getElementById("tokens");
const info = document.getElementById("info");
let pinned = null;
data.heads.forEach((name, h) => {{ const o = document.createElement("option");
  o.value = h; o.textContent = name; headSel.appendChild(o); }});
const spans = tokens.map((t, i) => {{ const s = document.createElement("span");
  s.textContent = t; s.title = "position " + i; box.appendChild(s);
  s.addEventListener("mouseenter", () => {{ if (pinned === null) show(i); }});
  s.addEventListener("click", () => {{ pinned = pinned === i ? null : i; show(i); }});
  return s; }});
function show(q) {{
  const row = patterns[headSel.value][q];
  spans.forEach((s, k) => {{ const a = row[k];
    s.style.background = "rgba(33, 102, 172, " + a + ")";
    s.style.color = a > 0.5 ? "white" : "black";
    s.className = k === q ? "query" : ""; s.title = "position " + k + ": " + a.toFixed(3); }});
  info.textContent = "query " + q + " (" + JSON.stringify(tokens[q]) + ")" +
    (pinned === null ? "" : " (pinned)");
}}
headSel.addEventListener("change", () => show(pinned === null ? 0 : pinned));
show(0);
</script></body></html>
"""


def attention_html(pattern, tokens, path=None, title: str = "attention", heads=None) -> str:
    """The page for ``pattern`` (H, T, T) or one head's (T, T) (rows queries, columns keys,
    e.g. ``cache["blocks.1.attn.hook_pattern"][0]``) over ``tokens`` (T strings or ids):
    returns the HTML and writes it to ``path`` if given. ``heads`` names the heads in the
    list (default "head 0", ...). Weights are rounded to 4 decimals."""
    pat = np.asarray(pattern, dtype=np.float64)
    if pat.ndim == 2:
        pat = pat[None]
    if pat.ndim != 3 or pat.shape[1] != pat.shape[2]:
        raise ValueError(f"expected a pattern (H, T, T) or (T, T), got shape {pat.shape}")
    H, T, _ = pat.shape
    tokens = [str(t) for t in (tokens.tolist() if isinstance(tokens, np.ndarray) else tokens)]
    if len(tokens) != T:
        raise ValueError(f"{len(tokens)} tokens for a pattern over {T} positions")
    heads = [f"head {h}" for h in range(H)] if heads is None else [str(h) for h in heads]
    if len(heads) != H:
        raise ValueError(f"{len(heads)} head names for {H} heads")
    data = {"tokens": tokens, "heads": heads, "patterns": np.round(pat, 4).tolist()}
    # "</" inside a script would end it early: escape the slash (still valid JSON)
    payload = json.dumps(data).replace("</", "<\\/")
    page = _PAGE.format(title=html.escape(title), data=payload)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(page, encoding="utf-8")
    return page
