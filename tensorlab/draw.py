"""Draw the computation graph that produced a tensor, as a ``graphviz.Digraph``.

Ops are boxes (their Function's name); tensors are ellipses: leaves (inputs and parameters,
with their names when known), and the output. Edges run in the direction of the forward pass
and are labelled with the shape of the tensor that flows along them. On request each node
shows a summary of its value (``show_values=True``) and of its gradient (``show_grad=True``,
after ``backward()``): the norm, and the entries themselves for tensors of a few entries. A
tensor's ``.name`` (or its name in ``params``) labels it, and an op node whose output was
given a name (``h.name = "h"``) shows it.

Whole models: nodes created inside ``tl.named_scope`` blocks (``nn.module_scopes(model)``
opens one per module call) are drawn inside nested clusters named like ``blocks.0.attn``;
``collapse=["blocks.0.attn"]`` (or ``collapse_depth=2``) draws each such module as one box.
``backward=True`` draws the backward graph instead: the same nodes as ``<Op>Backward``, with
edges in the direction the gradient flows.

The DOT source is ``g.source``. Two things turn it into a picture:

- Graphviz's ``dot`` program, on this machine: ``g.render(...)``, ``g.pipe(format="svg")``
  (``apt install graphviz``, ``brew install graphviz`` or ``conda install -c conda-forge
  graphviz``; without it they say so in one line).
- The browser: ``g.html`` is a self-contained page holding the DOT source and viz.js, which is
  Graphviz itself compiled to WebAssembly (``tensorlab/vendor/viz-js``, MIT; Graphviz under the
  EPL), so the page draws the graph with no ``dot`` installed, no server and no network.

In a notebook the drawing displays itself: as SVG made by ``dot`` when it is on PATH, as the
viz.js page otherwise.

:func:`backward_steps` runs ``backward()`` and returns a page to step through it: the
backward graph once, and one frame per node in the order the engine ran them (as
``tl.trace_backward`` lists them), the node at work and the gradients it sends highlighted, a
slider to move between frames. The page is one self-contained HTML file (no server, no
network) and displays itself in a notebook; its picture is drawn by ``dot`` when it is on PATH
and by viz.js in the browser otherwise (``render=`` chooses).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from collections import defaultdict
from functools import cache
from itertools import count
from pathlib import Path

from tensorlab.tensor import Tensor
from tensorlab.trace import summary, trace_backward

_DOT_MISSING = (
    "tl.draw: rendering needs Graphviz's dot program, which is not on PATH; install it "
    "(apt install graphviz, brew install graphviz, or conda install -c conda-forge graphviz), "
    "read the DOT text from .source, or open .html in a browser (viz.js draws it there)"
)
_VIZ_JS = Path(__file__).parent / "vendor" / "viz-js" / "viz-global.js"
_pages = count(1)  # each page in a notebook gets its own element ids


def _dot_on_path() -> bool:
    return shutil.which("dot") is not None


def _svg_by(render: str) -> bool:
    """Whether a page's picture is made here by ``dot`` ("dot"), or drawn by viz.js in the
    browser ("browser"); "auto" is ``dot`` when it is on PATH."""
    if render not in ("auto", "dot", "browser"):
        raise ValueError(f'render must be "auto", "dot" or "browser", not {render!r}')
    return render == "dot" or (render == "auto" and _dot_on_path())


@cache
def _viz_js() -> str:
    """viz.js, made to define ``window.Viz`` whatever module loader the page has (the classic
    Jupyter notebook has RequireJS, whose ``define`` the file would otherwise call)."""
    js = _VIZ_JS.read_text(encoding="utf-8")
    return f"(function (define, exports, module) {{\n{js}\n}}).call(window);\n"


def _graph_box(dot_source: str, svg: str | None) -> str:
    """The ``<div class="graph">`` of a page: the SVG when it was made here; otherwise a
    placeholder that the page's script replaces with the picture (``_DRAW_JS``). The DOT
    source sits below in a closed <details>, also where the script reads it from."""
    wait = (
        "The picture is drawn here by viz.js (Graphviz compiled to WebAssembly) when the "
        "page's script runs."
    )
    box = f'<div class="graph">{svg if svg is not None else f"<p>{wait}</p>"}</div>'
    source = f'<pre class="dot">{html.escape(dot_source)}</pre>'
    return f"{box}\n<details><summary>DOT source</summary>{source}</details>"


# The page's script, when the browser draws: viz.js (above it), then draw(root, then) puts the
# SVG in the root's .graph box and calls then() (or says why it could not draw).
_DRAW_JS = """  function draw(root, then) {
    var box = root.querySelector(".graph"), dot = root.querySelector("pre.dot").textContent;
    Viz.instance().then(function (viz) {
      box.replaceChildren(viz.renderSVGElement(dot));
      if (then) then();
    }).catch(function (e) { box.textContent = "viz.js could not draw the graph: " + e; });
  }
"""


def _fill(template: str, **values: str) -> str:
    """``template`` with each ``{NAME}`` replaced by ``values[NAME]``, in one pass (so a value
    that holds such a placeholder, viz.js or a tensor's name, is left as it is)."""
    return re.sub(r"\{([A-Z]+)\}", lambda m: values.get(m[1], m[0]), template)


def _page(title: str, fragment: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n{fragment}\n</body></html>\n"
    )


_Drawing = None


def _digraph_class():
    """``Drawing``, made once (graphviz is imported only when something is drawn)."""
    global _Drawing
    if _Drawing is not None:
        return _Drawing
    import graphviz

    class Drawing(graphviz.Digraph):
        """A ``graphviz.Digraph`` whose rendering says in one line that ``dot`` is missing."""

        def pipe(self, *args, **kwargs):
            try:
                return super().pipe(*args, **kwargs)
            except graphviz.ExecutableNotFound:
                raise RuntimeError(_DOT_MISSING) from None

        def render(self, *args, **kwargs):
            try:
                return super().render(*args, **kwargs)
            except graphviz.ExecutableNotFound:
                raise RuntimeError(_DOT_MISSING) from None

        def _fragment(self) -> str:
            """The drawing for a notebook cell or a page: drawn by viz.js in the browser."""
            p = f"tldraw{next(_pages)}_"
            return (
                f'<div id="{p}root" class="tldraw">\n'
                f"<style>#{p}root svg {{ max-width: 100%; height: auto; }}</style>\n"
                f"{_graph_box(self.source, None)}\n"
                f"<script>\n{_viz_js()}(function () {{\n{_DRAW_JS}"
                f'  draw(document.getElementById("{p}root"));\n}})();\n</script>\n</div>'
            )

        @property
        def html(self) -> str:
            """A self-contained page that draws the graph in any browser, without ``dot``."""
            return _page("tl.draw", self._fragment())

        def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
            if not _dot_on_path():  # the browser draws it: the page with viz.js
                return {"text/html": self._fragment(), "text/plain": _DRAWN_IN_BROWSER}
            return super()._repr_mimebundle_(include, exclude, **kwargs)

    _DRAWN_IN_BROWSER = "tl.draw: no dot on PATH; the notebook's browser draws it (viz.js)"
    Drawing.__module__ = __name__
    Drawing.__qualname__ = "Drawing"
    _Drawing = Drawing
    return Drawing


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _tensor_label(t: Tensor, name: str | None, show_grad: bool, show_values: bool = False) -> str:
    parts = [name] if name else []
    parts.append(f"{_fmt_shape(t.shape)} {t.dtype}")
    if show_values:
        parts.append(summary(t, "value"))
    if show_grad and t.grad is not None:
        parts.append(summary(t.grad, "grad"))
    return "\n".join(parts)


def _op_label(ctx, backward: bool, names: dict, show_grad: bool, show_values: bool) -> str:
    """The op's name, the name of its output when it has one, and the output's summaries."""
    parts = [ctx.name + ("Backward" if backward else "")]
    out = ctx._output_ref()
    if out is not None:
        name = names.get(id(out), out.name)
        if name:
            parts[0] += f" → {name}"
        if show_values:
            parts.append(summary(out, "value"))
        if show_grad and out.grad is not None:
            parts.append(summary(out.grad, "grad"))
    return "\n".join(parts)


def _parent_shapes(ctx) -> list:
    """The shapes of a freed node's inputs: a leaf's own, or the output shape each input
    node recorded when it ran (``Function.apply`` keeps ``output_shape``)."""
    return [p.shape if isinstance(p, Tensor) else p.output_shape for p in ctx.parents]


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
        else:  # freed by backward(): the structure remains in .parents
            parents = list(zip(ctx.parents, _parent_shapes(ctx)))
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
    show_values: bool = False,
    ids: str | None = None,
):
    """A ``graphviz.Digraph`` of the graph that produced ``root``.

    ``params`` maps names to tensors (e.g. ``dict(model.named_parameters())``) to label them;
    tensors' own ``.name`` is used otherwise. ``show_grad`` adds each tensor's gradient (its
    norm, and its entries if there are at most 6), where it is known: the leaves after
    ``backward()``, and ops whose output kept its gradient (``retain_grad()``).
    ``show_values`` adds the same summary of each value still alive. ``collapse`` /
    ``collapse_depth`` draw whole modules as single boxes; ``clusters=False`` ignores scopes;
    ``backward=True`` draws the gradient's graph. ``ids``: a prefix that gives every node
    and edge an SVG id (``{ids}f<n>``, ``{ids}e_<from>_<to>`` in forward terms), for pages
    that script the picture (:func:`backward_steps`).
    """
    names = {id(t): n for n, t in (params or {}).items()}
    rankdir = rankdir or ("BT" if backward else "TB")
    g = _digraph_class()(
        graph_attr={"rankdir": rankdir, **(graph_attr or {})},
        node_attr={"fontname": "Helvetica", "fontsize": "10"},
    )
    collapse = list(collapse)
    nodes, edges = _walk(root)
    tag = {} if ids is None else None

    def key(node) -> str:
        if isinstance(node, Tensor):
            return f"t{id(node)}"
        box = _collapsed(node.scope, collapse, collapse_depth) if clusters else None
        return f"m{box}" if box is not None else f"f{id(node)}"

    def attrs(k: str) -> dict:
        return tag if tag is not None else {"id": ids + k}

    # op nodes, grouped by scope into (nested) clusters
    by_scope: dict[str | None, list[tuple[str, str]]] = defaultdict(list)
    boxes: dict[str, int] = defaultdict(int)
    for ctx in nodes:
        k = key(ctx)
        if k.startswith("m"):
            boxes[k[1:]] += 1
            continue
        label = _op_label(ctx, backward, names, show_grad, show_values)
        by_scope[ctx.scope if clusters else None].append((k, label))
    for box, n_ops in boxes.items():
        parent = box.rsplit(".", 1)[0] if "." in box else None
        by_scope[parent].append((f"m{box}", f"{box}\n({n_ops} ops)"))

    def emit(graph, scope):
        style = dict(shape="box", style="filled", fillcolor="lightgray")
        for k, label in by_scope.get(scope, []):
            if k.startswith("m"):
                graph.node(k, label, shape="box3d", style="filled", fillcolor="khaki", **attrs(k))
            else:
                graph.node(k, label, **style, **attrs(k))
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
        _tensor_label(root, names.get(id(root), root.name), show_grad, show_values),
        shape="ellipse",
        style="filled",
        fillcolor="darkolivegreen1",
        **attrs(out_key),
    )
    drawn: set[tuple[str, str]] = set()
    leaves: set[str] = set()

    def edge(a: str, b: str, label: str) -> None:
        if a == b or (a, b) in drawn:
            return
        drawn.add((a, b))
        g.edge(*((b, a) if backward else (a, b)), label=label, **attrs(f"e_{a}_{b}"))

    if root._ctx is not None:
        edge(key(root._ctx), out_key, _fmt_shape(root.shape))
    for parent, child, shape in edges:
        if isinstance(parent, Tensor) and f"t{id(parent)}" not in leaves:
            k = f"t{id(parent)}"
            leaves.add(k)
            g.node(
                k,
                _tensor_label(parent, names.get(id(parent), parent.name), show_grad, show_values),
                shape="ellipse",
                style="filled",
                fillcolor="lightblue",
                **attrs(k),
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


# ---------------------------------------------------------------------- stepping through backward


class _StepRecorder(trace_backward):
    """``trace_backward`` that also keeps, per step, which drawn node ran and which drawn
    edges its gradients went along (with their summaries), for :func:`backward_steps`."""

    def __init__(self, names: dict[int, str]):
        super().__init__(quiet=True)
        self.names = names
        self.frames: list[dict] = []

    def _name(self, t: Tensor) -> str | None:
        return self.names.get(id(t), t.name)

    def _record(self, node, g, grads) -> None:
        super()._record(node, g, grads)
        me = f"f{id(node)}"
        out = node._output_ref()
        sends = []
        for t, gi in zip(node.inputs, grads):
            if gi is None:
                continue
            parent = t._ctx if t._ctx is not None else t
            target = f"t{id(parent)}" if isinstance(parent, Tensor) else f"f{id(parent)}"
            label = self._name(t)
            if label is None:
                label = "input" if isinstance(parent, Tensor) else parent.name
                if not isinstance(parent, Tensor) and parent.scope:
                    label += f" ({parent.scope})"
            sends.append(
                {
                    "edge": f"e_{target}_{me}",
                    "node": target,
                    "to": label,
                    "grad": f"{_fmt_shape(gi.shape)} {summary(gi)}",
                }
            )
        name = node.name + (f" → {self._name(out)}" if out is not None and self._name(out) else "")
        self.frames.append(
            {
                "node": me,
                "op": name,
                "scope": node.scope or "",
                "receives": f"{_fmt_shape(g.shape)} {summary(g)}",
                "value": f"{_fmt_shape(out.shape)} {summary(out)}" if out is not None else "",
                "sends": sends,
            }
        )


class BackwardSteps:
    """The page made by :func:`backward_steps`: ``frames`` (one dict per backward node, in
    the engine's order), ``dot`` (the backward graph's DOT source), ``svg`` (its picture made
    by ``dot``, or None where viz.js draws it in the browser), ``html`` (the whole page),
    ``save``; a notebook displays it (``_repr_html_``)."""

    def __init__(self, dot: str, svg: str | None, frames: list[dict], prefix: str, title: str):
        self.dot, self.svg, self.frames, self.prefix, self.title = dot, svg, frames, prefix, title

    def __len__(self) -> int:
        return len(self.frames)

    def _fragment(self) -> str:
        p = self.prefix
        data = json.dumps(self.frames).replace("</", "<\\/")
        here = self.svg is not None  # the SVG is in the page: no viz.js
        return _fill(
            _FRAGMENT,
            P=p,
            GRAPH=_graph_box(self.dot, self.svg),
            VIZ="" if here else _viz_js(),
            DRAW="" if here else _DRAW_JS,
            START="start();" if here else "draw(root, start);",
            FRAMES=data,
            N=str(len(self.frames)),
            TITLE=html.escape(self.title),
        )

    @property
    def html(self) -> str:
        return _page(self.title, self._fragment())

    def _repr_html_(self) -> str:
        return self._fragment()

    def save(self, path) -> str:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html)
        return str(path)


def backward_steps(
    root: Tensor,
    params: dict[str, Tensor] | None = None,
    grad=None,
    retain_graph: bool = False,
    clusters: bool = True,
    title: str | None = None,
    render: str = "auto",
) -> BackwardSteps:
    """Run ``root.backward(grad, retain_graph)`` and return a page that steps through it: one
    frame per node the engine ran, in its order, with the node at work, the gradient it
    received and the gradients it sent (their edges highlighted, shape and norm beside them).

    The graph is laid out before the backward (so every shape is known). ``render``: "dot"
    makes its SVG here with Graphviz's ``dot``; "browser" puts the DOT source and viz.js
    (Graphviz compiled to WebAssembly) in the page, and the browser draws it, with no ``dot``
    anywhere; "auto" is "dot" when ``dot`` is on PATH, "browser" otherwise.
    ``page.save("backward.html")`` writes the self-contained page; in a notebook the returned
    object displays itself. Open a page at frame k with ``backward.html#step=k``."""
    prefix = f"tlbs{next(_pages)}_"
    names = {id(t): n for n, t in (params or {}).items()}
    graph = draw(root, params=params, backward=True, clusters=clusters, ids=prefix)
    svg = None
    if _svg_by(render):
        svg = graph.pipe(format="svg").decode("utf-8")
        svg = svg[svg.index("<svg") :]
    recorder = _StepRecorder(names)
    with recorder:
        root.backward(grad, retain_graph=retain_graph)
    title = title or f"{names.get(id(root), root.name) or 'loss'}.backward()"
    return BackwardSteps(graph.source, svg, recorder.frames, prefix, title)


_FRAGMENT = """<div id="{P}root" class="tlbs">
<style>
#{P}root { font-family: Helvetica, Arial, sans-serif; font-size: 14px; }
#{P}root .bar { display: flex; gap: 8px; align-items: center; margin: 4px 0; }
#{P}root input[type=range] { flex: 1; }
#{P}root .panel { background: #fafafa; border: 1px solid #ddd; padding: 6px 10px;
  min-height: 7.5em; }
#{P}root .panel .op { font-weight: bold; font-size: 16px; }
#{P}root .panel .scope { color: #666; }
#{P}root .panel ul { margin: 2px 0; padding-left: 1.2em; }
#{P}root .panel .send { color: #c0392b; }
#{P}root .graph { overflow: auto; max-height: 75vh; border: 1px solid #eee; }
#{P}root .graph svg { max-width: 100%; height: auto; }
#{P}root .node.done polygon, #{P}root .node.done ellipse { fill: #d5ecd4; }
#{P}root .node.current polygon, #{P}root .node.current ellipse { fill: #ffb347;
  stroke: #d35400; stroke-width: 3px; }
#{P}root .node.receive polygon, #{P}root .node.receive ellipse { fill: #ffe3c2;
  stroke: #c0392b; stroke-width: 2px; }
#{P}root .edge.sent path { stroke: #c0392b; stroke-width: 3px; }
#{P}root .edge.sent polygon { fill: #c0392b; stroke: #c0392b; }
#{P}root .edge.sent text { fill: #c0392b; font-weight: bold; }
</style>
<div class="title"><b>{TITLE}</b>: one frame per node, in the order backward() ran them</div>
<div class="bar">
<button class="prev" type="button">&larr;</button>
<input class="slider" type="range" min="0" max="{N}" value="0" step="1" aria-label="step">
<button class="next" type="button">&rarr;</button>
<span class="count"></span>
</div>
<div class="panel"></div>
{GRAPH}
<script>
{VIZ}(function () {
{DRAW}  var P = "{P}", frames = {FRAMES};
  var root = document.getElementById(P + "root");
  var slider = root.querySelector(".slider"), panel = root.querySelector(".panel");
  slider.max = frames.length - 1;
  function el(id) { return document.getElementById(P + id); }
  function mark(id, cls) { var e = el(id); if (e) e.classList.add(cls); }
  function line(parent, tag, cls, text) {
    var e = document.createElement(tag); if (cls) e.className = cls;
    e.textContent = text; parent.appendChild(e); return e;
  }
  function show(i) {
    i = Math.max(0, Math.min(frames.length - 1, i));
    ["done", "current", "receive", "sent"].forEach(function (c) {
      root.querySelectorAll("." + c).forEach(function (e) { e.classList.remove(c); });
    });
    for (var j = 0; j < i; j++) mark(frames[j].node, "done");
    var f = frames[i];
    mark(f.node, "current");
    f.sends.forEach(function (s) { mark(s.edge, "sent"); mark(s.node, "receive"); });
    slider.value = i;
    root.querySelector(".count").textContent = "step " + (i + 1) + " of " + frames.length;
    panel.textContent = "";
    var head = line(panel, "div", "", "");
    line(head, "span", "op", f.op + "  ");
    line(head, "span", "scope", f.scope);
    line(panel, "div", "", "receives dL/d(output): " + f.receives);
    if (f.value) line(panel, "div", "", "its output: " + f.value);
    var ul = line(panel, "ul", "", "");
    if (!f.sends.length) line(ul, "li", "", "sends nothing (no input needs a gradient)");
    f.sends.forEach(function (s) { line(ul, "li", "send", "sends to " + s.to + ": " + s.grad); });
    var cur = el(f.node), box = root.querySelector(".graph");  // scroll the picture only
    if (cur) {
      var r = cur.getBoundingClientRect(), b = box.getBoundingClientRect();
      if (r.top < b.top || r.bottom > b.bottom) box.scrollTop += r.top - b.top - b.height / 2;
      if (r.left < b.left || r.right > b.right) box.scrollLeft += r.left - b.left - b.width / 2;
    }
  }
  slider.addEventListener("input", function () { show(+slider.value); });
  root.querySelector(".prev").addEventListener("click", function () { show(+slider.value - 1); });
  root.querySelector(".next").addEventListener("click", function () { show(+slider.value + 1); });
  function start() {  // at the frame the address asks for (#step=k), else the first
    var m = /step=(\\d+)/.exec(window.location.hash || "");
    show(m ? +m[1] : 0);
  }
  {START}
})();
</script>
</div>"""
