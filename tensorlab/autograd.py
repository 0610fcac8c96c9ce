"""The backward pass: walk the graph from the output back to the leaves, applying the chain rule.

The graph's nodes are the :class:`~tensorlab.function.Function` objects that made each
non-leaf tensor, plus the leaf tensors themselves. ``backward`` does three things:

1. Order the nodes so that each comes after every node that uses its output (a reverse
   topological order, found by an iterative depth-first search: no recursion, so a chain of
   100,000 ops is fine).
2. Walk that order carrying one gradient per node: a node's gradient is complete once every
   consumer has sent its share (they are summed), and then its ``backward`` turns it into one
   gradient per input. A gradient whose shape differs from its input's (broadcasting) is
   summed back with ``sum_to``, the engine's one generic place for it (a few ops whose
   forward broadcasts internally, such as ``MatMul``'s batch axes, sum their own).
3. Accumulate into ``.grad`` at the leaves, and free what the nodes saved unless
   ``retain_graph=True``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorlab import function
from tensorlab.backend import LOW_PRECISION, as_dtype, xp_of
from tensorlab.function import AnomalyError, creation_site
from tensorlab.tensor import Tensor

_FREED = (
    "{op}: trying to backward through the graph a second time, but its saved tensors were "
    "freed by the first backward. Pass retain_graph=True to the first backward() if you need "
    "to backward through this graph again."
)


def _node_of(t: Tensor):
    return t._ctx if t._ctx is not None else t


def topological_order(roots: Sequence, stop: set[int] = frozenset()) -> list:
    """Nodes reachable from ``roots``, each listed after all of its inputs' nodes. Nodes whose
    id is in ``stop`` are listed but not expanded (their inputs are not followed)."""
    order, seen = [], set()
    stack = [(r, False) for r in roots]
    push, pop, append, mark = stack.append, stack.pop, order.append, seen.add
    while stack:
        node, expanded = pop()
        if expanded:
            append(node)
            continue
        if id(node) in seen:
            continue
        mark(id(node))
        push((node, True))
        if isinstance(node, Tensor) or id(node) in stop:  # a leaf, or where to stop
            continue
        inputs = node.inputs
        if inputs is None:  # freed by an earlier backward: the structure survives in .parents
            for p in node.parents:
                if id(p) not in seen:
                    push((p, False))
            continue
        for t in inputs:
            if t.requires_grad:
                p = t._ctx if t._ctx is not None else t
                if id(p) not in seen:
                    push((p, False))
    return order


def run_backward(roots, root_grads, retain_graph=False, create_graph=False, inputs=None):
    """The engine behind :meth:`Tensor.backward` and :func:`grad`: the three steps of the
    module docstring. With ``inputs`` given, their gradients are returned instead (no
    ``.grad`` is touched)."""
    order = topological_order([_node_of(r) for r in roots])
    pending: dict[int, Tensor] = {}
    for r, g in zip(roots, root_grads):
        _send(pending, r, g)
    out = _Outputs(inputs, create_graph, root_grads)
    # record the backward's own ops only if asked; run them in the dtypes the forward chose
    with set_grad_enabled(create_graph), autocast(None):
        try:
            _propagate(order, pending, out.arrive, create_graph, free=not retain_graph)
        finally:
            if not retain_graph:  # after an error: the nodes the loop did not reach
                for node in order:
                    if not isinstance(node, Tensor):
                        _free(node)
    return out.results


def _propagate(
    order: list, pending: dict, arrive, create_graph: bool, stop=frozenset(), free=False
):
    """The loop itself. For each node, latest first (taken off the end of ``order``): take its
    gradient (complete, since every consumer came before it), let ``arrive`` see it (hooks,
    ``.grad``), and send each input its share. Leaves, and the nodes in ``stop``, send
    nothing further.

    With ``free`` (a backward without retain_graph) a node's saved tensors are dropped as soon
    as its backward has run, so memory falls as the backward goes. What is left in ``order``
    afterwards was not reached (an error)."""
    pop = order.pop
    while order:
        node = pop()
        g = pending.pop(id(node), None)
        if isinstance(node, Tensor):  # a leaf
            if g is not None:
                arrive(node, g)
            continue
        if g is not None:
            g = arrive(node, g)
            if id(node) not in stop:
                for t, gi in zip(node.inputs, local_grads(node, g, create_graph)):
                    if gi is not None:
                        _send(pending, t, gi)
        if free:
            _free(node)


def _send(pending: dict, t: Tensor, g: Tensor) -> None:
    """Add ``g`` to the gradient waiting at the node that made ``t``."""
    k = id(t._ctx if t._ctx is not None else t)
    prev = pending.get(k)
    pending[k] = g if prev is None else prev + g


def local_grads(node, g: Tensor, create_graph: bool = False) -> list:
    """One node's step of the chain rule: the gradient of each input (a Tensor in the input's
    shape, or None where no gradient flows), from the gradient ``g`` of its output: the op's
    ``backward`` (a fused op's composed form under ``create_graph``, docs/autograd.md section
    5), with broadcasting and type promotion undone here once for every op, and the checks
    (freed graph, in-place change, anomaly, trace)."""
    ins = node.inputs
    if ins is None:
        raise RuntimeError(_FREED.format(op=node.name))
    for t, v in zip(ins, node._versions):
        if t._vc[0] != v:
            raise _changed(node, "an input", t, v)
    if node.saves_output:
        out = node._output_ref()
        if out is not None and out._vc[0] != node._output_version:
            raise _changed(node, "its output", out, node._output_version)
    if create_graph and node.composed is not None:  # the composed form's gradients, as a graph
        grads = grads_at_inputs(node.composed(*node.inputs, **node.params), g, node.inputs)
    else:
        grads = type(node).backward(node, g)
        if grads.__class__ is not tuple:
            grads = (grads,)
    result = []
    for t, gi in zip(ins, grads):
        if gi is not None and t.requires_grad:
            if gi.__class__ is not Tensor:
                gi = Tensor._wrap(gi)  # a fused op's backward returns arrays
            if gi.data.shape != t.data.shape:
                gi = gi.sum_to(t.data.shape)  # undo broadcasting
            dtype = t.data.dtype
            if gi.data.dtype is not dtype and gi.data.dtype != dtype:
                gi = gi.astype(dtype)  # undo type promotion
        else:
            gi = None
        result.append(gi)
    result += [None] * (len(ins) - len(result))
    modes = function.modes
    if modes.anomaly:
        for gi in result:
            if gi is not None and not bool(xp_of(gi.data).isfinite(gi.data).all()):
                raise AnomalyError(
                    f"{node.name} produced NaN or Inf in its backward (gradient of "
                    f"shape {gi.shape})\n{creation_site(node)}",
                    node,
                    gradient=True,
                )
    if modes.trace is not None:
        modes.trace(node, g, result)
    return result


def _changed(node, what: str, t: Tensor, saved: int) -> RuntimeError:
    return RuntimeError(
        f"{node.name}: {what} of shape {t.shape}, saved for backward, was modified in place "
        f"(its version went from {saved} to {t._version}) after the forward pass (through "
        "itself, a view or a detach() of it); make a copy before changing it"
    )


def grads_at_inputs(y: Tensor, g: Tensor, ins, create_graph: bool = True) -> list:
    """Backpropagate ``g`` from ``y`` to the tensors ``ins`` that ``y`` was computed from,
    stopping there: their gradients (None where none arrives), nothing stored in ``.grad``,
    no hooks run, nothing beyond ``ins`` visited. For the composed form of a fused op, and
    for the recomputed forward of a checkpoint (tensorlab/checkpoint.py)."""
    stop = {id(_node_of(t)) for t in ins if t.requires_grad}
    pending: dict[int, Tensor] = {}
    _send(pending, y, g)
    reached: dict[int, Tensor] = {}  # the gradient arriving at each input: no hooks, no .grad

    def arrive(n, gn: Tensor) -> Tensor:
        if id(n) in stop:
            reached[id(n)] = gn
        return gn

    _propagate(topological_order([_node_of(y)], stop), pending, arrive, create_graph, stop)
    return [reached.get(id(_node_of(t))) if t.requires_grad else None for t in ins]


class _Outputs:
    """Where gradients end up: a leaf's ``.grad`` (or, for :func:`grad`, the returned list)
    and the ``.grad`` of non-leaves that asked for it (``retain_grad()``); tensor hooks run
    first and may replace the gradient.

    A gradient arriving at a ``.grad`` that holds one already is added into it in place (as
    PyTorch's AccumulateGrad does without create_graph): no new array per accumulation, which
    gradient accumulation over micro-batches pays at every parameter. That is safe because a
    ``.grad`` never shares memory with another array the caller holds (:func:`_owned`)."""

    def __init__(self, inputs, create_graph: bool, root_grads=()):
        self.create_graph = create_graph
        # arrays a .grad must not alias: the caller's root gradients, those stored so far
        self.stored: set[int] = {id(g.data) for g in root_grads}
        self.capture = None
        self.results = None
        if inputs is not None:
            self.capture: dict[int, list[int]] = {}
            for i, t in enumerate(inputs):
                self.capture.setdefault(id(_node_of(t)), []).append(i)
            self.results = [None] * len(inputs)

    def arrive(self, node, g: Tensor) -> Tensor:
        t = node if isinstance(node, Tensor) else node._output_ref()
        if t is None:  # the output tensor is gone: nothing to hook or store
            return g
        if t._hooks:
            g = _run_hooks(t._hooks, g)
            self.stored.add(id(g.data))  # (a hook's result may be held by the hook)
        if self.capture is not None:
            for i in self.capture.get(id(node), ()):
                self.results[i] = g
            if node is t:  # a leaf: grad() returns its gradient and leaves .grad alone
                return g
        if node is t or t._retains_grad:
            if t.grad is None:
                t.grad = _owned(g, self.create_graph, self.stored)
                self.stored.add(id(t.grad.data))
            elif (
                self.create_graph
                or t.grad.requires_grad
                or g.requires_grad
                or isinstance(t.grad.data, np.generic)  # (a NumPy scalar has no memory to add into)
            ):
                t.grad = t.grad + g  # (a graph: a new tensor)
            else:
                t.grad.add_(g)  # (bumps its version: a node that saved it will refuse)
        return g


def _run_hooks(hooks, g: Tensor) -> Tensor:
    """Each hook sees the gradient so far and may return a new one. It must not edit it in
    place (the array may be shared with other gradients): it gets a read-only view, and an
    in-place write is refused with a one-line error saying so."""
    for hook in hooks:
        try:
            new = hook(_read_only(g))
        except ValueError as e:
            if "read-only" not in str(e):
                raise
            raise RuntimeError(
                f"a backward hook ({getattr(hook, '__name__', hook)!s:.40}) edited its gradient "
                f"of shape {g.shape} in place; a hook must return a new gradient (return g * 2), "
                "not edit it in place"
            ) from None
        if new is not None:
            if new.shape != g.shape:
                raise RuntimeError(
                    f"a hook returned a gradient of shape {new.shape}; the "
                    f"tensor's gradient has shape {g.shape}"
                )
            g = new
    return g


def _read_only(g: Tensor) -> Tensor:
    """``g`` for a hook: a read-only view of its array (NumPy's flag; a CuPy array has none,
    and a gradient that carries a graph is handed as it is: in-place ops refuse it anyway)."""
    if g.requires_grad or not getattr(getattr(g.data, "flags", None), "writeable", False):
        return g
    view = g.data.view()
    view.flags.writeable = False
    return Tensor._wrap(view)


def _owned(g: Tensor, create_graph: bool, stored: set) -> Tensor:
    """``g`` to store as a ``.grad``, copied when its memory may be shared: a view (maybe a
    read-only broadcast), an array already stored in this pass (``a + b`` sends the same
    tensor to both), the caller's own root gradient or a hook's result (``stored``), or,
    without create_graph, a tensor that carries a graph."""
    if g.data.base is None and id(g.data) not in stored and (create_graph or not g.requires_grad):
        return g
    if create_graph and g.requires_grad:
        return g * 1.0  # a copy that stays in the graph
    return Tensor._wrap(g.data.copy())


def _free(node) -> None:
    """Drop what ``node`` saved for backward, keeping only the graph's structure."""
    inputs = node.inputs
    if inputs is None:
        return
    node.parents = tuple([t._ctx if t._ctx is not None else t for t in inputs if t.requires_grad])
    for t in inputs:
        # An input made by an op whose backward has not run yet may be that op's only
        # reference to its own output: keep it alive until then.
        ctx = t._ctx
        if ctx is not None and ctx.inputs is not None:
            ctx._keep = t
    node.inputs = None
    node._keep = None
    node.params = None


def _root_grad(t: Tensor, grad, what: str) -> Tensor:
    if not t.requires_grad:
        raise RuntimeError(
            f"{what}: the tensor does not require grad and has no grad_fn; no input that "
            "requires grad was used to compute it (or it was computed under no_grad)"
        )
    if grad is None:
        if t.size != 1:
            raise RuntimeError(
                f"{what}: the output has shape {t.shape}; backward() without an argument is "
                "only for scalars. Reduce it (e.g. .sum()) or pass grad= of the same shape"
            )
        return Tensor._wrap(xp_of(t.data).ones_like(t.data))
    g = grad if isinstance(grad, Tensor) else Tensor._wrap(xp_of(t.data).asarray(grad, t.dtype))
    if g.shape != t.shape:
        raise RuntimeError(f"{what}: grad has shape {g.shape} but the output has shape {t.shape}")
    return g


def backward(
    tensor: Tensor, grad=None, retain_graph: bool = False, create_graph: bool = False
) -> None:
    """Backpropagate from ``tensor``; see :meth:`Tensor.backward`."""
    g = _root_grad(tensor, grad, "backward")
    run_backward(
        [tensor], [g], retain_graph=retain_graph or create_graph, create_graph=create_graph
    )


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple[Tensor, ...]:
    """Gradients of ``outputs`` with respect to ``inputs``, returned instead of stored.

    With ``create_graph=True`` the returned gradients are themselves differentiable, so
    ``grad(grad(f(x), x, create_graph=True)[0].sum(), x)`` is a second derivative.
    """
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    roots = [_root_grad(o, g, "grad") for o, g in zip(outputs, grad_outputs)]
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {t.shape}) does not require grad")
    if retain_graph is None:
        retain_graph = create_graph
    results = run_backward(outputs, roots, retain_graph, create_graph, inputs=inputs)
    for i, r in enumerate(results):
        if r is None and not allow_unused:
            raise RuntimeError(
                f"grad: input {i} (shape {inputs[i].shape}) was not used to "
                "compute the outputs; pass allow_unused=True to get None"
            )
    return tuple(results)


# ------------------------------------------------------------------ switches
class set_grad_enabled(function.Switch):
    """Turn graph recording on or off inside a ``with`` block (or a decorated function)."""

    switch = "grad_enabled"


class no_grad(set_grad_enabled):
    """Record no graph: for evaluation and parameter updates. Usable as a decorator."""

    def __init__(self):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Record the graph again inside a ``no_grad`` region."""

    def __init__(self):
        super().__init__(True)


def is_grad_enabled() -> bool:
    return function.modes.grad_enabled


class autocast(function.Switch):
    """Mixed precision: inside this block, matrix products (``a @ b``, ``tl.einsum``,
    ``nn.functional.linear``) round their float32 (and other half) inputs to ``dtype``
    ("bfloat16" or "float16") and run in it, summing in float32 (the rule:
    ``tensorlab.ops.linalg.autocasts``); parameters stay float32 (the master weights) and
    receive float32 gradients: through Cast nodes for ``@`` and ``einsum``, straight from the
    product for ``linear`` (which rounds its operands itself). ``autocast(None)`` (or
    "float32") turns it off inside an outer block. Call ``backward()`` after the block (the
    backward runs in the dtypes the forward recorded, either way)."""

    switch = "autocast"

    def __init__(self, dtype="bfloat16"):
        name = "float32" if dtype is None else str(as_dtype(dtype))
        if name not in (*LOW_PRECISION, "float32"):
            raise ValueError(
                f"autocast: dtype {name!r} is not a mixed-precision dtype; use one of "
                f"{', '.join(LOW_PRECISION)} (or None / 'float32' for off)"
            )
        super().__init__(None if name == "float32" else as_dtype(name))


class detect_anomaly(function.Switch):
    """Inside this block, the first op whose forward or backward makes NaN or Inf raises an
    :class:`AnomalyError` naming the op and the line of user code that created it.
    (Slower: every op records its creation stack and checks its result.)"""

    switch = "anomaly"

    def __init__(self):
        super().__init__(True)
