"""Draw the computation graph that produced a tensor, as a ``graphviz.Digraph``.

Ops are boxes (their Function's name); tensors are ellipses: leaves (inputs and parameters,
with their names when known), and the output. Edges run in the direction of the forward pass
and are labelled with the shape of the tensor that flows along them, when it is still known.
After ``backward()`` the leaves can show the norm of their gradient (``show_grad=True``).

The DOT source is ``g.source``; ``g.render(...)`` or ``g.pipe(format="svg")`` need the
Graphviz ``dot`` program; in a notebook the Digraph displays itself as SVG.
"""

from __future__ import annotations

import numpy as np

from tensorlab.tensor import Tensor


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _tensor_label(t: Tensor, name: str | None, show_grad: bool) -> str:
    parts = [name] if name else []
    parts.append(f"{_fmt_shape(t.shape)} {t.dtype}")
    if show_grad and t.grad is not None:
        norm = float(np.sqrt((np.asarray(t.grad.numpy(), dtype=np.float64) ** 2).sum()))
        parts.append(f"|grad| = {norm:.3g}")
    return "\n".join(parts)


def draw(
    root: Tensor,
    params: dict[str, Tensor] | None = None,
    show_grad: bool = False,
    rankdir: str = "TB",
    graph_attr: dict | None = None,
):
    """A ``graphviz.Digraph`` of the graph that produced ``root``.

    ``params`` maps names to tensors (e.g. ``dict(model.named_parameters())``) to label them;
    tensors' own ``.name`` is used otherwise. ``show_grad`` adds each leaf's gradient norm.
    """
    import graphviz

    names = {id(t): n for n, t in (params or {}).items()}
    g = graphviz.Digraph(
        graph_attr={"rankdir": rankdir, **(graph_attr or {})},
        node_attr={"fontname": "Helvetica", "fontsize": "10"},
    )

    def tensor_node(t: Tensor, kind: str) -> str:
        key = f"t{id(t)}"
        style = {"leaf": "lightblue", "output": "darkolivegreen1"}[kind]
        g.node(
            key,
            _tensor_label(t, names.get(id(t), t.name), show_grad),
            shape="ellipse",
            style="filled",
            fillcolor=style,
        )
        return key

    seen: set[int] = set()
    out_key = tensor_node(root, "output")
    if root._ctx is None:
        return g
    stack = [root._ctx]
    g.edge(f"f{id(root._ctx)}", out_key, label=_fmt_shape(root.shape))
    while stack:
        ctx = stack.pop()
        if id(ctx) in seen:
            continue
        seen.add(id(ctx))
        g.node(f"f{id(ctx)}", ctx.name, shape="box", style="filled", fillcolor="lightgray")
        if ctx.inputs is not None:
            edges = [
                (t._ctx if t._ctx is not None else t, t.shape)
                for t in ctx.inputs
                if t.requires_grad
            ]
        else:  # the graph was freed by backward(): the structure remains, shapes do not
            edges = [(p, p.shape if isinstance(p, Tensor) else None) for p in ctx.parents]
        for parent, shape in edges:
            label = _fmt_shape(shape) if shape is not None else ""
            if isinstance(parent, Tensor):
                key = f"t{id(parent)}"
                if id(parent) not in seen:
                    seen.add(id(parent))
                    tensor_node(parent, "leaf")
            else:
                key = f"f{id(parent)}"
                stack.append(parent)
            g.edge(key, f"f{id(ctx)}", label=label)
    return g
