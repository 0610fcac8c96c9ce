"""tl.draw: the DOT source names every op and tensor of a small graph; scopes become
clusters; collapsing and the backward view; rendering where Graphviz's dot exists."""

import re
import shutil

import numpy as np
import pytest

import tensorlab as tl


def small_graph():
    w = tl.tensor(np.ones((3, 2), np.float32), requires_grad=True, name="w")
    x = tl.tensor(np.ones((4, 3), np.float32))
    y = (x @ w).tanh().sum()
    return w, y


def op_labels(source: str) -> list[str]:
    return re.findall(r"\[label=(\w+) fillcolor=lightgray", source)


def test_dot_has_one_node_per_op_and_the_leaf_and_output():
    w, y = small_graph()
    src = tl.draw(y).source
    assert sorted(op_labels(src)) == ["MatMul", "Sum", "Tanh"]
    assert 'label="w\n(3, 2) float32"' in src  # the parameter, by its name
    assert 'label="() float32"' in src  # the output
    # forward edges: MatMul -> Tanh -> Sum, labelled with shapes
    assert src.count('[label="(4, 2)"]') == 2


def test_params_dict_names_and_gradient_norms_after_backward():
    w, y = small_graph()
    y.backward()
    src = tl.draw(y, params={"layer.W": w}, show_grad=True).source
    norm = float(np.sqrt((w.grad.numpy().astype(np.float64) ** 2).sum()))
    assert "layer.W" in src and f"|grad| = {norm:.3g}" in src
    # the graph was freed by backward, but its structure can still be drawn
    assert sorted(op_labels(src)) == ["MatMul", "Sum", "Tanh"]


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
