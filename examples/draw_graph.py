"""Draw the computation graphs of an MLP and of a one-layer GPT.

    python examples/draw_graph.py            # writes out/graphs/*.svg and *.png

Every op is a box, every parameter an ellipse labelled with its name; in the GPT the ops are
grouped by the module that made them (``blocks.0.attn``, ...). The second GPT picture
collapses each block's sublayers into single boxes and shows the backward graph with the
gradient norm of every parameter. Needs Graphviz's ``dot`` for the pictures; without it the
DOT sources are written instead, and it says how to install Graphviz.
"""

import shutil
from pathlib import Path

import numpy as np

import nn
import tensorlab as tl
from gpt.config import GPTConfig
from gpt.model import GPT

NO_DOT = (
    "no pictures: Graphviz's dot program is not installed (apt install graphviz, brew install "
    "graphviz or conda install -c conda-forge graphviz); the .dot files above are their sources"
)


def mlp_graph():
    tl.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2))
    x = tl.randn(16, 2)
    y = np.random.default_rng(0).integers(0, 2, 16)
    with nn.module_scopes(mlp):
        loss = nn.functional.cross_entropy(mlp(x), y)
    loss.backward()
    return tl.draw(loss, params=dict(mlp.named_parameters()), show_grad=True, rankdir="LR")


def gpt_graphs():
    tl.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, d_model=16))
    idx = np.random.default_rng(0).integers(0, 32, (2, 8))
    with nn.module_scopes(model):
        _, loss = model(idx, idx)
    params = dict(model.named_parameters())
    forward = tl.draw(loss, params=params)
    loss.backward()
    collapsed = tl.draw(loss, params=params, collapse_depth=3, backward=True, show_grad=True)
    return forward, collapsed


def main(out_dir: str = "out/graphs") -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    graphs = {"mlp": mlp_graph()}
    graphs["gpt_1layer"], graphs["gpt_1layer_backward"] = gpt_graphs()
    written, dot = [], shutil.which("dot")
    for name, g in graphs.items():
        n_ops = g.source.count("fillcolor=lightgray")
        if dot:
            for fmt in ("svg", "png"):
                written.append(Path(g.render(out / name, format=fmt, cleanup=True)))
        else:
            (out / f"{name}.dot").write_text(g.source)
            written.append(out / f"{name}.dot")
        print(f"{name:<22} {n_ops:3d} op nodes -> {written[-1]}")
    if not dot:
        print(NO_DOT)
    return written


if __name__ == "__main__":
    main()
