"""gpt/circuits/views.py (the offline HTML attention view, its script run under Node with a
small stand-in for the page) and gpt/circuits/watch.py (the training callback and its plot)."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from gpt import circuits as C

from .circuit_models import hand_built_induction_model

# A stand-in for the browser's document: elements that keep their children, style, class,
# text and event handlers. The page's script runs against it, then a hover and a click are
# replayed and the shading of every token is printed as JSON.
NODE_DOM = """
const handlers = [];
function el(id) { return { id, children: [], style: {}, className: "", textContent: "",
  title: "", value: "0", appendChild(c) { this.children.push(c); },
  addEventListener(ev, fn) { handlers.push([this, ev, fn]); } }; }
const byId = { head: el("head"), tokens: el("tokens"), info: el("info") };
global.document = { getElementById: (id) => byId[id], createElement: (t) => el(t) };
const script = require("fs").readFileSync(process.argv[2], "utf8");
eval(script);
function fire(node, ev) { handlers.filter(h => h[0] === node && h[1] === ev)
  .forEach(h => h[2]()); }
const spans = byId.tokens.children;
const shade = () => spans.map(s => parseFloat(s.style.background.split(",")[3]));
fire(spans[3], "mouseenter");
const hover = shade();
fire(spans[2], "click");                    // pin query 2 ...
fire(spans[4], "mouseenter");               // ... so hovering another changes nothing
const pinned = shade();
byId.head.value = "1"; fire(byId.head, "change");
const head1 = shade();
console.log(JSON.stringify({ hover, pinned, head1, n: spans.length,
  texts: spans.map(s => s.textContent), query: spans.map(s => s.className) }));
"""


def page_and_pattern(tmp_path):
    rng = np.random.default_rng(0)
    pattern = np.tril(rng.random((2, 5, 5)))
    pattern /= pattern.sum(-1, keepdims=True)
    tokens = ["a", "<b>", "</script>", 'q"', "e"]
    page = C.attention_html(pattern, tokens, tmp_path / "view" / "attn.html", title="L1 <x>")
    return page, pattern, tokens


def test_attention_html_is_self_contained_and_carries_the_pattern(tmp_path):
    page, pattern, tokens = page_and_pattern(tmp_path)
    assert (tmp_path / "view" / "attn.html").read_text(encoding="utf-8") == page
    assert "http" not in page and "src=" not in page  # nothing fetched: works offline
    assert page.count("</script>") == 1  # the token "</script>" cannot end the script
    assert "<title>L1 &lt;x&gt;</title>" in page
    start = page.index("const data = ") + len("const data = ")
    data = json.loads(page[start : page.index(";\n", start)])
    assert data["tokens"] == tokens and data["heads"] == ["head 0", "head 1"]
    np.testing.assert_allclose(data["patterns"], pattern, atol=5e-5)
    with pytest.raises(ValueError, match="4 tokens for a pattern over 5 positions"):
        C.attention_html(pattern, tokens[:4])
    with pytest.raises(ValueError, match="expected a pattern"):
        C.attention_html(pattern[0, 0], tokens)
    with pytest.raises(ValueError, match=r"expected a pattern .* got shape \(2, 3, 5\)"):
        C.attention_html(pattern[:, 2:], tokens)  # queries and keys must be the same tokens


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js runs the page's script")
def test_attention_html_script_shades_what_the_hovered_token_attends_to(tmp_path):
    page, pattern, tokens = page_and_pattern(tmp_path)
    script = page[page.index("<script>") + 8 : page.index("</script>")]
    (tmp_path / "page.js").write_text(script, encoding="utf-8")
    (tmp_path / "dom.js").write_text(NODE_DOM, encoding="utf-8")
    out = subprocess.run(
        ["node", str(tmp_path / "dom.js"), str(tmp_path / "page.js")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["n"] == 5 and got["texts"] == tokens
    np.testing.assert_allclose(got["hover"], pattern[0, 3], atol=5e-5)
    np.testing.assert_allclose(got["pinned"], pattern[0, 2], atol=5e-5)
    np.testing.assert_allclose(got["head1"], pattern[1, 2], atol=5e-5)
    assert got["query"] == ["", "", "query", "", ""]


def test_watcher_records_every_n_steps_and_reads_the_hand_built_circuit(tmp_path):
    """The default measure on the hand-built induction model: induction score near 1 in
    layer 1, previous-token near 1 in layer 0, the induction head's OV copies (copying
    score 1: it writes 3·token into the token subspace W_U reads), and its keys read the
    previous-token head (K-composition above zero)."""
    model = hand_built_induction_model(V=9, seq_len=8)
    kw = dict(seq_len=8, batch=4, low=0, high=8, bos=8, seed=1)
    watcher = C.CircuitWatcher(every=3, **kw)
    records = [watcher(step, model, loss=10.0 / step) for step in range(1, 8)]
    assert [r is not None for r in records] == [True, False, True, False, False, True, False]
    assert [r["step"] for r in watcher.history] == [1, 3, 6]
    rec = watcher.history[-1]
    assert rec["loss"] == pytest.approx(10 / 6)
    assert rec["induction"][1, 0] > 0.9 and rec["previous_token"][0, 0] > 0.9
    assert rec["repeat_loss"] < 0.1
    assert rec["ov_copying"][1, 0] == pytest.approx(1.0, abs=1e-6)
    assert rec["k_composition"][0, 0] == 0 and rec["k_composition"][1, 0] > 0.1
    k = C.composition_scores(model)["k"]  # each head's largest K-composition with an earlier one
    L, H = rec["k_composition"].shape
    for layer, h in np.ndindex(L, H):
        earlier = [k[layer, h, l0, h0] for l0 in range(layer) for h0 in range(H)]
        assert rec["k_composition"][layer, h] == max(earlier, default=0.0)
    steps, loss = watcher.series("loss")
    np.testing.assert_array_equal(steps, [1, 3, 6])
    np.testing.assert_allclose(loss, [10, 10 / 3, 10 / 6])
    with pytest.raises(KeyError, match="no record has 'bogus'"):
        watcher.series("bogus")
    assert watcher(7, model, force=True)["step"] == 7
    from gpt import plots

    if plots.available():
        assert watcher.plot(tmp_path / "forming.png") == str(tmp_path / "forming.png")
        assert (tmp_path / "forming.png").stat().st_size > 0
    with pytest.raises(ValueError, match="every must be a positive"):
        C.CircuitWatcher(every=0)


def test_watcher_with_its_own_measure():
    calls = []
    watcher = C.CircuitWatcher(every=2, first=False, measure=lambda m: calls.append(m) or {"x": 1})
    for step in range(1, 6):
        watcher(step, "model")
    assert calls == ["model", "model"] and [r["step"] for r in watcher.history] == [2, 4]
    assert "loss" not in watcher.history[0]


def test_watcher_plot_names_its_series_in_words(tmp_path, monkeypatch):
    """The legends say what each line is ("induction score"), not the record's key
    ("max induction", "repeat_loss"); a measure of one's own gets its key without the
    underscores."""
    pytest.importorskip("matplotlib")
    from gpt import plots

    shown = {}

    def keep_legends(fig, path):
        shown["legends"] = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes]
        plots._pyplot().close(fig)
        return str(path)

    monkeypatch.setattr(plots, "_save", keep_legends)
    model = hand_built_induction_model(V=9, seq_len=8)
    watcher = C.CircuitWatcher(every=1, seq_len=8, batch=2, low=0, high=8, bos=8)
    for step in (1, 2):
        watcher(step, model, loss=1.0 / step)
    watcher.history[-1]["my_score"] = watcher.history[0]["my_score"] = np.ones((2, 1))
    watcher.plot(tmp_path / "forming.png")
    top, bottom = shown["legends"]
    assert top == ["training loss", "loss on the 2nd copy of repeated tokens"]
    assert sorted(bottom) == sorted(
        [
            "induction score",
            "previous-token score",
            "OV copying score",
            "K-composition with an earlier head",
            "my score",
        ]
    )
