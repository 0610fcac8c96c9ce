"""tl.draw: the DOT source names every op and tensor of a small graph; scopes become
clusters; collapsing and the backward view; value and gradient summaries and names; shapes on
every edge; one line when Graphviz's dot is missing; rendering where it exists; the
step-through page of a backward (one frame per node)."""

import importlib.util
import re
import shutil

import numpy as np
import pytest

import tensorlab as tl

# tl.draw builds its graph with the graphviz Python package (the dev extra; not every machine
# that runs the suite has it, the GPU one for instance)
needs_graphviz = pytest.mark.skipif(
    importlib.util.find_spec("graphviz") is None, reason="needs the graphviz Python package"
)


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


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
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
def test_a_missing_dot_is_one_line(monkeypatch):
    from tensorlab.draw import backward_steps

    w, y = small_graph()
    g = tl.draw(y)
    monkeypatch.setenv("PATH", "")
    for render in (lambda: g.pipe(format="svg"), lambda: backward_steps(y)):
        with pytest.raises(RuntimeError) as err:
            render()
        msg = str(err.value)
        assert "\n" not in msg and "Graphviz's dot" in msg and "apt install graphviz" in msg
        assert err.value.__cause__ is None and err.value.__suppress_context__
    assert w.grad is None  # backward_steps refused before running backward
    assert g._repr_mimebundle_() == {"text/plain": msg}  # a notebook shows the sentence


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


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_step_through_page_has_one_frame_per_backward_node():
    from tensorlab.autograd import topological_order
    from tensorlab.draw import backward_steps

    model, loss = gpt_loss()
    ops = [n for n in topological_order([loss._ctx]) if not isinstance(n, tl.Tensor)]
    page = backward_steps(loss, params=dict(model.named_parameters()))
    # a 1-layer GPT: 22 nodes (the loss is the per-row cross entropy, summed, divided), 22 frames
    assert len(page) == len(ops) == 22
    # the engine's order: what trace_backward lists, and every parameter got its gradient
    _, again = gpt_loss()
    with tl.trace_backward(quiet=True) as trace:
        again.backward()
    assert [f["op"].split(" →")[0] for f in page.frames] == [s.op for s in trace.steps]
    assert all(p.grad is not None for p in model.parameters())
    # every frame's node and every edge it sends along are in the picture
    for f in page.frames:
        assert f'id="{page.prefix}{f["node"]}"' in page.svg
        for s in f["sends"]:
            assert f'id="{page.prefix}{s["edge"]}"' in page.svg
            assert f'id="{page.prefix}{s["node"]}"' in page.svg
    sent = {s["to"] for f in page.frames for s in f["sends"]}
    assert {"blocks.0.attn.W_q", "ln_final.w", "LinearFn (blocks.0.mlp)"} <= sent
    # self-contained: no network, no server, one page
    page_html = page.html
    assert page_html.startswith("<!DOCTYPE html>") and "<svg" in page_html
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", page_html)
    assert "<link" not in page_html and page._repr_html_() in page_html


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_a_name_holding_a_closing_script_tag_does_not_end_the_pages_script():
    from tensorlab.draw import backward_steps

    w, y = small_graph()
    w.name = "</script><b>w"
    page = backward_steps(y)
    assert page.html.count("</script>") == 1  # the page's own
    assert any(s["to"] == "</script><b>w" for f in page.frames for s in f["sends"])


BROWSER = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium to run the page's script")
def test_step_through_page_highlights_the_frame_in_a_browser(tmp_path):
    import subprocess

    from tensorlab.draw import backward_steps

    model, loss = gpt_loss()
    page = backward_steps(loss, params=dict(model.named_parameters()))
    path = tmp_path / "backward.html"
    page.save(path)
    k = 3
    dom = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            f"{path.as_uri()}#step={k}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    classes = dict(re.findall(rf'id="{page.prefix}(\w+)" class="([\w ]+)"', dom))
    frame = page.frames[k]
    assert classes[frame["node"]] == "node current"
    done = {n for n, c in classes.items() if c == "node done"}
    assert done == {f["node"] for f in page.frames[:k]}
    for s in frame["sends"]:
        assert classes[s["edge"]] == "edge sent" and classes[s["node"]] == "node receive"
    assert f"step {k + 1} of {len(page)}" in dom and frame["op"] in dom
