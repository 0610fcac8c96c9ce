"""Draw the computation graph that produced a tensor, as a ``graphviz.Digraph``.

Ops are boxes (their Function's name); tensors are ellipses: leaves (inputs and parameters,
with their names when known), and the output. Edges run in the direction of the forward pass
and are labelled with the shape of the tensor that flows along them, when it is still known.
After ``backward()`` the leaves can show the norm of their gradient (``show_grad=True``).

Whole models: nodes created inside ``tl.named_scope`` blocks (``nn.module_scopes(model)``
opens one per module call) are drawn inside nested clusters named like ``blocks.0.attn``;
``collapse=["blocks.0.attn"]`` (or ``collapse_depth=2``) draws each such module as one box.
``backward=True`` draws the backward graph instead: the same nodes as ``<Op>Backward``, with
edges in the direction the gradient flows.

The DOT source is ``g.source``; ``g.render(...)`` or ``g.pipe(format="svg")`` need the
Graphviz ``dot`` program; in a notebook the Digraph displays itself as SVG.
"""

from __future__ import annotations

from collections import defaultdict

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


def _walk(root: Tensor):
    """Every op node reachable from ``root``, and the edges (parent, child, shape)."""
    nodes, edges, seen = [], [], set()
    stack = [root._ctx] if root._ctx is not None else []
    while stack:
        ctx = stack.pop()
        if id(ctx) in seen:
            continue
        seen.add(id(ctx))
        nodes.append(ctx)
        if ctx.inputs is not None:
            parents = [
                (t._ctx if t._ctx is not None else t, t.shape)
                for t in ctx.inputs
                if t.requires_grad
            ]
        else:  # freed by backward(): the structure remains, intermediate shapes do not
            parents = [(p, p.shape if isinstance(p, Tensor) else None) for p in ctx.parents]
        for parent, shape in parents:
            edges.append((parent, ctx, shape))
            if not isinstance(parent, Tensor):
                stack.append(parent)
    return nodes, edges


def _collapsed(scope: str | None, collapse: list[str], depth: int | None) -> str | None:
    """The module box an op is drawn in when collapsing, or None to draw the op itself."""
    if scope is None:
        return None
    for prefix in collapse:
        if scope == prefix or scope.startswith(prefix + "."):
            return prefix
    if depth is not None:
        parts = scope.split(".")
        if len(parts) >= depth:
            return ".".join(parts[:depth])
    return None


def draw(
    root: Tensor,
    params: dict[str, Tensor] | None = None,
    show_grad: bool = False,
    collapse: list[str] | tuple[str, ...] = (),
    collapse_depth: int | None = None,
    backward: bool = False,
    clusters: bool = True,
    rankdir: str | None = None,
    graph_attr: dict | None = None,
):
    """A ``graphviz.Digraph`` of the graph that produced ``root``.

    ``params`` maps names to tensors (e.g. ``dict(model.named_parameters())``) to label them;
    tensors' own ``.name`` is used otherwise. ``show_grad`` adds each leaf's gradient norm.
    ``collapse`` / ``collapse_depth`` draw whole modules as single boxes; ``clusters=False``
    ignores scopes; ``backward=True`` draws the gradient's graph.
    """
    import graphviz

    names = {id(t): n for n, t in (params or {}).items()}
    rankdir = rankdir or ("BT" if backward else "TB")
    g = graphviz.Digraph(
        graph_attr={"rankdir": rankdir, **(graph_attr or {})},
        node_attr={"fontname": "Helvetica", "fontsize": "10"},
    )
    collapse = list(collapse)
    nodes, edges = _walk(root)

    def key(node) -> str:
        if isinstance(node, Tensor):
            return f"t{id(node)}"
        box = _collapsed(node.scope, collapse, collapse_depth) if clusters else None
        return f"m{box}" if box is not None else f"f{id(node)}"

    # op nodes, grouped by scope into (nested) clusters
    by_scope: dict[str | None, list[tuple[str, str]]] = defaultdict(list)
    boxes: dict[str, int] = defaultdict(int)
    for ctx in nodes:
        k = key(ctx)
        if k.startswith("m"):
            boxes[k[1:]] += 1
            continue
        label = ctx.name + ("Backward" if backward else "")
        by_scope[ctx.scope if clusters else None].append((k, label))
    for box, count in boxes.items():
        parent = box.rsplit(".", 1)[0] if "." in box else None
        by_scope[parent].append((f"m{box}", f"{box}\n({count} ops)"))

    def emit(graph, scope):
        style = dict(shape="box", style="filled", fillcolor="lightgray")
        for k, label in by_scope.get(scope, []):
            if k.startswith("m"):
                graph.node(k, label, shape="box3d", style="filled", fillcolor="khaki")
            else:
                graph.node(k, label, **style)
        children = sorted(
            {_parent_at(s, scope) for s in by_scope if s and s != scope and _below(s, scope)}
        )
        for child in children:
            with graph.subgraph(name=f"cluster_{child}") as sub:
                sub.attr(label=child, style="rounded", color="gray50", fontname="Helvetica")
                emit(sub, child)

    emit(g, None)

    # tensors: the output and the leaves
    out_key = f"t{id(root)}"
    g.node(
        out_key,
        _tensor_label(root, names.get(id(root), root.name), show_grad),
        shape="ellipse",
        style="filled",
        fillcolor="darkolivegreen1",
    )
    drawn: set[tuple[str, str]] = set()
    leaves: set[str] = set()

    def edge(a: str, b: str, label: str) -> None:
        if a == b or (a, b) in drawn:
            return
        drawn.add((a, b))
        g.edge(*((b, a) if backward else (a, b)), label=label)

    if root._ctx is not None:
        edge(key(root._ctx), out_key, _fmt_shape(root.shape))
    for parent, child, shape in edges:
        if isinstance(parent, Tensor) and f"t{id(parent)}" not in leaves:
            leaves.add(f"t{id(parent)}")
            g.node(
                f"t{id(parent)}",
                _tensor_label(parent, names.get(id(parent), parent.name), show_grad),
                shape="ellipse",
                style="filled",
                fillcolor="lightblue",
            )
        edge(key(parent), key(child), _fmt_shape(shape) if shape is not None else "")
    return g


def _below(scope: str, ancestor: str | None) -> bool:
    return ancestor is None or scope.startswith(ancestor + ".")


def _parent_at(scope: str, ancestor: str | None) -> str:
    """The child of ``ancestor`` on the path to ``scope`` (``blocks`` for ``blocks.0.attn``
    under None)."""
    rest = scope if ancestor is None else scope[len(ancestor) + 1 :]
    head = rest.split(".")[0]
    return head if ancestor is None else f"{ancestor}.{head}"
