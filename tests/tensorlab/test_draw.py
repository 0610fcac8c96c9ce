"""tl.draw: the DOT source names every op and tensor of a small graph; scopes become
clusters; collapsing and the backward view; value and gradient summaries and names; shapes on
every edge; one line when Graphviz's dot is missing; rendering where it exists; pages that the
browser draws with the vendored viz.js where it does not; the step-through page of a backward
(one frame per node), with its SVG made by dot or drawn by the browser, in headless Chromium."""

import configparser
import html
import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import tensorlab as tl

# tl.draw builds its graph with the graphviz Python package (the dev extra; not every machine
# that runs the suite has it, the GPU one for instance)
needs_graphviz = pytest.mark.skipif(
    importlib.util.find_spec("graphviz") is None, reason="needs the graphviz Python package"
)
needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz's dot is not installed"
)
# the step-through page's two ways to a picture: dot here, or viz.js in the browser (no dot)
RENDERS = [pytest.param("dot", marks=needs_dot), "browser"]
VIZ_JS = importlib.import_module("tensorlab.draw")._VIZ_JS.parent  # vendor/viz-js


def without_dot(monkeypatch, tmp_path):
    """PATH is an empty folder: no dot (nor anything else) can be found."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("dot") is None


def small_graph():
    w = tl.tensor(np.ones((3, 2), np.float32), requires_grad=True, name="w")
    x = tl.tensor(np.ones((4, 3), np.float32))
    y = (x @ w).tanh().sum()
    return w, y


def op_labels(source: str) -> list[str]:
    return re.findall(r"\[label=(\w+) fillcolor=lightgray", source)


@needs_graphviz
def test_dot_has_one_node_per_op_and_the_leaf_and_output():
    w, y = small_graph()
    src = tl.draw(y).source
    assert sorted(op_labels(src)) == ["MatMul", "Sum", "Tanh"]
    assert 'label="w\n(3, 2) float32"' in src  # the parameter, by its name
    assert 'label="() float32"' in src  # the output
    # forward edges: MatMul -> Tanh -> Sum, labelled with shapes
    assert src.count('[label="(4, 2)"]') == 2


@needs_graphviz
def test_params_dict_names_and_gradient_norms_after_backward():
    w, y = small_graph()
    y.backward()
    src = tl.draw(y, params={"layer.W": w}, show_grad=True).source
    norm = float(np.sqrt((w.grad.numpy().astype(np.float64) ** 2).sum()))
    assert "layer.W" in src and f"|grad| = {norm:.3g}" in src
    # the graph was freed by backward, but its structure can still be drawn
    assert sorted(op_labels(src)) == ["MatMul", "Sum", "Tanh"]


@needs_graphviz
def test_named_scopes_become_nested_clusters_and_can_collapse():
    w = tl.randn(3, 3, requires_grad=True)
    with tl.named_scope("block"):
        with tl.named_scope("attn"):
            h = (w @ w).exp()
        h = h * 2
    y = h.sum()
    src = tl.draw(y).source
    assert "subgraph cluster_block {" in src and 'subgraph "cluster_block.attn" {' in src
    # the attn cluster sits inside the block cluster
    assert src.index("cluster_block {") < src.index('"cluster_block.attn" {')
    collapsed = tl.draw(y, collapse=["block.attn"]).source
    assert "block.attn\n(2 ops)" in collapsed
    assert sorted(op_labels(collapsed)) == ["Mul", "Sum"]


@needs_graphviz
def test_collapse_takes_whole_scope_names_and_depth_counts_parts():
    w = tl.randn(3, 3, requires_grad=True)
    h = w
    for i in (1, 10):
        with tl.named_scope(f"blocks.{i}"):
            h = (h @ w).tanh()
    y = h.sum()
    # "blocks.1" is not a prefix of the scope "blocks.10": that block stays drawn op by op
    src = tl.draw(y, collapse=["blocks.1"]).source
    assert "blocks.1\n(2 ops)" in src and "blocks.10\n" not in src
    assert sorted(op_labels(src)) == ["MatMul", "Sum", "Tanh"]
    # collapse_depth=2 collapses every scope of two or more parts to its first two
    src = tl.draw(y, collapse_depth=2).source
    assert "blocks.1\n(2 ops)" in src and "blocks.10\n(2 ops)" in src
    assert op_labels(src) == ["Sum"]
    assert op_labels(tl.draw(y, collapse_depth=3).source).count("Tanh") == 2  # none that deep


@needs_graphviz
def test_only_tensors_a_gradient_reaches_are_drawn():
    """The constant operand x of x @ w is no leaf of the gradient's graph: not drawn."""
    w, y = small_graph()
    src = tl.draw(y).source
    assert src.count("shape=ellipse") == 2  # w and the output
    assert "(4, 3) float32" not in src


def test_a_summary_lists_the_entries_of_small_tensors_only():
    from tensorlab.draw import summary

    assert summary(np.full(6, 2.0), "g") == "|g| = 4.9  [2, 2, 2, 2, 2, 2]"
    assert summary(np.full(7, 2.0), "g") == "|g| = 5.29"
    assert summary(np.zeros(0)) == "norm 0"


@needs_graphviz
def test_backward_view_reverses_edges_and_renames_ops():
    w, y = small_graph()
    src = tl.draw(y, backward=True).source
    assert sorted(op_labels(src)) == ["MatMulBackward", "SumBackward", "TanhBackward"]
    ids = dict((label, key) for key, label in re.findall(r"(\w+) \[label=(\w+Backward)", src))
    assert f"{ids['SumBackward']} -> {ids['TanhBackward']}" in src


@needs_dot
def test_renders_svg():
    _, y = small_graph()
    svg = tl.draw(y).pipe(format="svg").decode()
    assert svg.lstrip().startswith("<?xml") and "Tanh" in svg


@needs_graphviz
def test_values_gradients_and_names_on_request():
    x = tl.tensor(np.array([[1.0, -2.0]]), requires_grad=True, name="x")
    h = x * 3.0
    h.name = "h"
    h.retain_grad()
    y = h.sum()
    y.backward()
    src = tl.draw(y, show_values=True, show_grad=True).source
    assert "Mul → h" in src  # an op node shows the name the user gave its output
    assert "|value| = 6.71  [3, -6]" in src  # h = [3, -6]: norm √45, and the entries
    assert "|grad| = 1.41  [1, 1]" in src  # h.grad, kept by retain_grad
    assert "|grad| = 4.24  [3, 3]" in src  # x.grad
    big = tl.randn(10, 10, requires_grad=True)
    src = tl.draw(big.sum(), show_values=True).source
    # 100 entries: the norm alone
    assert re.search(r'label="\(10, 10\) float32\n\|value\| = [\d.]+" ', src), src


@needs_graphviz
def test_edges_keep_their_shapes_while_the_outputs_live():
    w = tl.tensor(np.ones((3, 2), np.float32), requires_grad=True)
    h = tl.tensor(np.ones((4, 3), np.float32)) @ w
    t = h.tanh()
    y = t.sum()
    y.backward()
    assert tl.draw(y).source.count('[label="(4, 2)"]') == 2  # MatMul -> Tanh -> Sum


@needs_graphviz
def test_op_to_op_edges_keep_their_shapes_after_backward():
    w, y = small_graph()
    y.backward()  # frees the graph: intermediate outputs are gone
    src = tl.draw(y).source
    assert src.count('[label="(4, 2)"]') == 2 and '[label=""]' not in src


def test_every_node_keeps_its_output_shape_after_backward():
    """The labels of a freed graph's edges come from the shape each node recorded when it
    ran (``output_shape``), since the intermediate outputs are gone."""
    from tensorlab.autograd import topological_order

    w, y = small_graph()
    nodes = [n for n in topological_order([y._ctx]) if not isinstance(n, tl.Tensor)]
    shapes = {id(n): n._output_ref().shape for n in nodes}
    y.backward()
    assert all(n.inputs is None for n in nodes)  # freed
    assert {id(n): n.output_shape for n in nodes} == shapes


@needs_graphviz
def test_a_missing_dot_is_one_line(monkeypatch, tmp_path):
    """Rendering here, or a step page asked to have its SVG made by dot, say in one line that
    dot is missing, and where to get it or how to draw without it."""
    from tensorlab.draw import backward_steps

    w, y = small_graph()
    g = tl.draw(y)
    without_dot(monkeypatch, tmp_path)
    for render in (lambda: g.pipe(format="svg"), lambda: backward_steps(y, render="dot")):
        with pytest.raises(RuntimeError) as err:
            render()
        msg = str(err.value)
        assert "\n" not in msg and "Graphviz's dot" in msg and "apt install graphviz" in msg
        assert "open .html in a browser" in msg
        assert err.value.__cause__ is None and err.value.__suppress_context__
    assert w.grad is None  # backward_steps refused before running backward
    with pytest.raises(ValueError, match="render must be"):
        backward_steps(y, render="svg")


def viz_page_parts(page: str) -> dict:
    """What a page drawn by the browser must hold: the DOT (HTML-escaped, in <pre class=dot>),
    viz.js (the vendored file, whole) and the one script that runs both."""
    viz = (VIZ_JS / "viz-global.js").read_text(encoding="utf-8")
    dot = re.search(r'<pre class="dot">(.*?)</pre>', page, re.S)
    return {
        "dot": html.unescape(dot[1]) if dot else None,
        "viz.js": viz in page,
        "scripts": page.count("<script>"),
        "draws": "Viz.instance()" in page and "renderSVGElement" in page,
    }


@needs_graphviz
def test_without_dot_a_notebook_gets_a_drawing_the_browser_makes(monkeypatch, tmp_path):
    w, y = small_graph()
    g = tl.draw(y, show_values=True)
    without_dot(monkeypatch, tmp_path)
    bundle = g._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"} and "viz.js" in bundle["text/plain"]
    parts = viz_page_parts(bundle["text/html"])
    assert parts == {"dot": g.source, "viz.js": True, "scripts": 1, "draws": True}
    page = g.html  # the same, as a page of its own
    assert page.startswith("<!DOCTYPE html>") and viz_page_parts(page)["dot"] == g.source
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", page)  # no network


@needs_dot
def test_with_dot_a_notebook_gets_dots_svg_and_no_viz_js():
    _, y = small_graph()
    bundle = tl.draw(y)._repr_mimebundle_()
    assert "image/svg+xml" in bundle and "text/html" not in bundle


def test_viz_js_ships_with_its_licences_as_package_data():
    """The vendored file is MIT (viz.js) with Graphviz (EPL-1.0) and Expat (MIT) compiled in:
    the three licences sit beside it, and setup.cfg ships the folder with the package."""
    files = {p.name: p.read_text(encoding="utf-8") for p in VIZ_JS.iterdir()}
    assert "Viz.js 3.31.0" in files["viz-global.js"][:200]
    assert "MIT License" in files["LICENSE"] and "Michael Daines" in files["LICENSE"]
    assert "Eclipse Public License - v 1.0" in files["LICENSE-graphviz"]
    assert "Expat maintainers" in files["LICENSE-expat"]
    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).parents[2] / "setup.cfg")
    assert cfg["options.package_data"]["tensorlab"].split() == ["vendor/viz-js/*"]


def gpt_loss():
    import nn
    from gpt.config import GPTConfig
    from gpt.model import GPT

    tl.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, d_model=16))
    idx = np.random.default_rng(0).integers(0, 32, (2, 8))
    with nn.module_scopes(model):
        _, loss = model(idx, idx)
    return model, loss


def drawn_ids(page) -> set[str]:
    """The element ids of the step page's picture: from dot's SVG, or from the DOT source that
    viz.js draws in the browser (the same ids: the same Graphviz)."""
    if page.svg is not None:
        ids = re.findall(r'id="([^"]+)"', page.svg)
    else:
        ids = re.findall(r'id="?(\w+)"?[ \]]', page.dot)
    return {i for i in ids if i.startswith(page.prefix)}  # not Graphviz's own (graph0, clust1)


@needs_graphviz
@pytest.mark.parametrize("render", RENDERS)
def test_step_through_page_has_one_frame_per_backward_node(render, monkeypatch, tmp_path):
    from tensorlab.autograd import topological_order
    from tensorlab.draw import backward_steps

    model, loss = gpt_loss()
    ops = [n for n in topological_order([loss._ctx]) if not isinstance(n, tl.Tensor)]
    if render == "browser":  # "auto" without dot: the browser draws, nothing needs dot
        without_dot(monkeypatch, tmp_path)
    page = backward_steps(loss, params=dict(model.named_parameters()))
    assert (page.svg is None) == (render == "browser")
    # a 1-layer GPT: 20 nodes (the loss is one: the per-row cross entropies, each divided by
    # the rows' number and summed inside that node), 20 frames
    assert len(page) == len(ops) == 20
    # the engine's order: what trace_backward lists, and every parameter got its gradient
    _, again = gpt_loss()
    with tl.trace_backward(quiet=True) as trace:
        again.backward()
    assert [f["op"].split(" →")[0] for f in page.frames] == [s.op for s in trace.steps]
    assert all(p.grad is not None for p in model.parameters())
    # every frame's node and every edge it sends along are in the picture
    ids = drawn_ids(page)
    for f in page.frames:
        assert page.prefix + f["node"] in ids
        for s in f["sends"]:
            assert {page.prefix + s["edge"], page.prefix + s["node"]} <= ids
    sent = {s["to"] for f in page.frames for s in f["sends"]}
    assert {"blocks.0.attn.W_q", "ln_final.w", "LinearFn (blocks.0.mlp)"} <= sent
    # self-contained: no network, no server, one page
    page_html = page.html
    assert page_html.startswith("<!DOCTYPE html>")
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", page_html)
    assert "<link" not in page_html and page._repr_html_() in page_html
    parts = viz_page_parts(page_html)
    assert parts["dot"] == page.dot and parts["scripts"] == 1
    if render == "dot":  # the SVG is in the page: no viz.js
        assert "<svg" in page_html and not parts["viz.js"] and not parts["draws"]
    else:  # the browser draws: viz.js whole, started once the page has run
        assert parts["viz.js"] and parts["draws"] and "draw(root, start);" in page_html


@needs_graphviz
@pytest.mark.parametrize("render", RENDERS)
def test_a_name_holding_a_closing_script_tag_does_not_end_the_pages_script(render):
    from tensorlab.draw import backward_steps

    w, y = small_graph()
    w.name = "</script><b>w{FRAMES}"  # {FRAMES}: a placeholder of the page's template
    page = backward_steps(y, render=render)
    assert page.html.count("</script>") == 1  # the page's own
    assert page.html.count('frames = [{"node"') == 1  # the frames went in once
    assert any(s["to"] == "</script><b>w{FRAMES}" for f in page.frames for s in f["sends"])
    assert viz_page_parts(page.html)["dot"] == page.dot  # the name, escaped, in the DOT


BROWSER = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no headless Chromium (chromium, chromium-browser, google-chrome)"
)


def browser_dom(path: Path, fragment: str = "") -> str:
    """The page's DOM after its scripts ran (viz.js's drawing included), by headless Chromium.
    Its virtual time does not wait for WebAssembly to compile: on a busy machine a dump can
    come before viz.js has drawn (the placeholder still there), so that is tried three times."""
    import subprocess

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000"]
    for _ in range(3):
        dom = subprocess.run(
            [BROWSER, *args, "--dump-dom", path.as_uri() + fragment],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        if "The picture is drawn here by viz.js" not in dom:
            break
    return dom


@needs_browser
@needs_graphviz
@pytest.mark.parametrize("render", RENDERS)
def test_step_through_page_highlights_the_frame_in_a_browser(render, monkeypatch, tmp_path):
    from tensorlab.draw import backward_steps

    if render == "browser":
        without_dot(monkeypatch, tmp_path)
    model, loss = gpt_loss()
    page = backward_steps(loss, params=dict(model.named_parameters()))
    path = tmp_path / "backward.html"
    page.save(path)
    k = 3
    dom = browser_dom(path, f"#step={k}")
    classes = dict(re.findall(rf'id="{page.prefix}(\w+)" class="([\w ]+)"', dom))
    # the whole picture is there (drawn by dot here, or by viz.js in the browser)
    assert {page.prefix + i for i in classes if i != "root"} == drawn_ids(page)
    frame = page.frames[k]
    assert classes[frame["node"]] == "node current"
    done = {n for n, c in classes.items() if c == "node done"}
    assert done == {f["node"] for f in page.frames[:k]}
    for s in frame["sends"]:
        assert classes[s["edge"]] == "edge sent" and classes[s["node"]] == "node receive"
    assert f"step {k + 1} of {len(page)}" in dom and frame["op"] in dom
    assert "The picture is drawn here by viz.js" not in dom  # the placeholder was replaced


@needs_browser
@needs_graphviz
def test_a_drawing_without_dot_is_drawn_by_the_browser(monkeypatch, tmp_path):
    w, y = small_graph()
    g = tl.draw(y, params={"W": w})
    without_dot(monkeypatch, tmp_path)
    path = tmp_path / "draw.html"
    path.write_text(g.html, encoding="utf-8")
    dom = browser_dom(path)
    svg = dom[dom.index("<svg") : dom.index("</svg>")]  # the drawing replaced the placeholder
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert {"MatMul", "Tanh", "Sum", "W", "(3, 2) float32", "(4, 2)"} <= set(texts)
    assert svg.count('class="node"') == 5 and svg.count('class="edge"') == 4
