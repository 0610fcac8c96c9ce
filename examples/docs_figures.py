"""Draw the pictures the docs show, into docs/img/ (about 10 s; needs Graphviz and matplotlib).

    python examples/docs_figures.py

- ``start_here_graph.svg``: the first page's graph (docs/start_here.md), every node with its
  value and every leaf (x, w, b) with its gradient after ``backward()``;
- ``causal_mask.png``: which keys each query may see under the causal mask;
- ``induction_pattern.png``: the pattern of an induction head on a repeated random sequence,
  from the small model ``examples/interpretability_tour.py`` trains (800 steps): in the second
  copy each query attends to the token after its previous occurrence, an off-diagonal stripe.
"""

from pathlib import Path

import numpy as np

import gpt.circuits as C
import tensorlab as tl
from gpt import plots

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"


def graph() -> Path:
    x = tl.tensor([[1.0, 2.0]], dtype="float64", requires_grad=True)
    w = tl.tensor([[0.5], [-1.0]], dtype="float64", requires_grad=True)
    b = tl.tensor([0.1], dtype="float64", requires_grad=True)
    loss = ((x @ w + b).tanh() ** 2).sum()
    loss.backward(retain_graph=True)
    dot = tl.draw(loss, {"x": x, "w": w, "b": b}, show_values=True, show_grad=True)
    path = OUT / "start_here_graph.svg"
    path.write_bytes(dot.pipe(format="svg"))
    return path


def causal_mask(T: int = 8) -> Path:
    keep = np.tril(np.ones((T, T)))
    return Path(
        plots.attention_pattern(
            keep, OUT / "causal_mask.png", title="causal mask: query i sees keys j ≤ i"
        )
    )


def induction_pattern() -> Path:
    import interpretability_tour as tour

    tl.manual_seed(0)
    model, _ = tour.train_model(seed=0, steps=800)
    tokens = C.repeated_tokens(1, 11, high=64, seed=100)
    _, cache = C.run_with_cache(model, tl.tensor(tokens))
    scores = C.induction_scores(model)
    head = int(np.argmax(scores[1]))
    pattern = cache["blocks.1.attn.hook_pattern"][0, head]
    return Path(
        plots.attention_pattern(
            pattern,
            OUT / "induction_pattern.png",
            tokens=tokens[0],
            title=f"layer 1, head {head}: induction (score {scores[1][head]:.2f})",
        )
    )


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    OUT.mkdir(parents=True, exist_ok=True)
    for make in (graph, causal_mask, induction_pattern):
        print(make())
