"""Functional transforms: derivatives of a function, as functions of its inputs.

All are built on :func:`tensorlab.grad`, the vector-Jacobian product vᵀ J (J = ∂y/∂x):
:func:`vjp` is that product; :func:`jvp`, J u, is the VJP of the linear map w ↦ wᵀ J (two
backward passes, the double-VJP trick); :func:`jacobian` is one VJP per output entry;
:func:`hessian` the Jacobian of the gradient; :func:`vhp` and :func:`hvp` the gradient of
∇f · v. The table and the reasoning: docs/autograd.md, section 10.

Signatures follow ``torch.autograd.functional``: ``inputs`` is a Tensor or a tuple of Tensors,
and results take the same structure; ``v`` has the structure of the outputs (vjp) or of the
inputs (jvp, hvp). Inputs are detached and made variables of ``func`` (the caller's graph is
not touched), unless ``create_graph=True``, which keeps the results differentiable in the
original inputs. An input that ``func`` does not use gets zeros (``strict=True``: an error).
"""

from __future__ import annotations

from collections.abc import Callable

from tensorlab.autograd import grad
from tensorlab.backend import xp_of
from tensorlab.ops.shape import stack
from tensorlab.tensor import Tensor


def _as_tuple(x, what: str, fn: str) -> tuple[bool, tuple[Tensor, ...]]:
    """(was it a tuple, the tensors as a tuple), with a one-line error for anything else."""
    is_tuple = isinstance(x, tuple | list)
    items = tuple(x) if is_tuple else (x,)
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise TypeError(f"{fn}: {what} {i} is a {type(t).__name__}, not a Tensor")
    return is_tuple, items


def _variables(inputs, create_graph: bool, fn: str) -> tuple[bool, tuple[Tensor, ...]]:
    """(were the inputs a tuple, the inputs as the variables of func)."""
    in_tuple, inputs = _as_tuple(inputs, "input", fn)
    out = []
    for i, x in enumerate(inputs):
        if x.dtype.kind != "f":
            raise TypeError(
                f"{fn}: input {i} has dtype {x.dtype}; only floating-point inputs have derivatives"
            )
        if create_graph and x.requires_grad:
            out.append(x.reshape(x.shape))  # a new node: derivatives stay linked to x
        else:
            out.append(x.detach().requires_grad_())
    return in_tuple, tuple(out)


def _call(func: Callable, xs: tuple[Tensor, ...], fn: str) -> tuple[bool, tuple[Tensor, ...]]:
    return _as_tuple(func(*xs), "output", fn)


def _fill(grads, like, strict: bool, fn: str, what: str) -> tuple[Tensor, ...]:
    """Zeros where no gradient flowed (an input or output that does not depend)."""
    out = []
    for i, (g, x) in enumerate(zip(grads, like)):
        if g is None:
            if strict:
                raise RuntimeError(f"{fn}: {what} {i} (shape {x.shape}) does not depend on it")
            g = Tensor._wrap(x.data * 0)
        out.append(g)
    return tuple(out)


def _detach_all(ts, create_graph: bool) -> tuple[Tensor, ...]:
    return tuple(ts) if create_graph else tuple(t.detach() for t in ts)


def _match(v, like: tuple[Tensor, ...], fn: str, what: str) -> tuple[Tensor, ...]:
    if v is None:
        if len(like) != 1 or like[0].size != 1:
            raise RuntimeError(
                f"{fn}: v can be left out only when the {what} is a single entry; "
                f"it has shapes {[t.shape for t in like]}"
            )
        return (Tensor._wrap(like[0].data * 0 + 1),)
    _, vs = _as_tuple(v, "v", fn)
    if len(vs) != len(like) or any(a.shape != b.shape for a, b in zip(vs, like)):
        raise RuntimeError(
            f"{fn}: v has shapes {[t.shape for t in vs]} but the {what} has shapes "
            f"{[t.shape for t in like]}"
        )
    return vs


def _vjp_of(outs, xs, vs, create_graph: bool, retain: bool = True):
    """Σ vᵀ ∂out/∂xs over the outputs that depend on xs (None: out does not)."""
    pairs = [(o, v) for o, v in zip(outs, vs) if o is not None and o.requires_grad]
    if not pairs:
        return [None] * len(xs)
    return grad(
        [o for o, _ in pairs],
        list(xs),
        grad_outputs=[v for _, v in pairs],
        retain_graph=retain,
        create_graph=create_graph,
        allow_unused=True,
    )


def vjp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), vᵀ ∂func/∂inputs), v shaped like the output(s)."""
    in_tuple, xs = _variables(inputs, create_graph, "vjp")
    out_tuple, outs = _call(func, xs, "vjp")
    vs = _match(v, outs, "vjp", "output")
    grads = _fill(_vjp_of(outs, xs, vs, create_graph), xs, strict, "vjp", "input")
    outs, grads = _detach_all(outs, create_graph), _detach_all(grads, create_graph)
    return (outs if out_tuple else outs[0]), (grads if in_tuple else grads[0])


def jvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), ∂func/∂inputs · v), v shaped like the input(s); by the double-VJP trick
    (module docstring)."""
    in_tuple, xs = _variables(inputs, create_graph, "jvp")
    out_tuple, outs = _call(func, xs, "jvp")
    vs = _match(v, xs, "jvp", "input")
    ws = tuple(Tensor._wrap(o.data * 0).requires_grad_() for o in outs)  # the dummy w
    hs = _vjp_of(outs, xs, ws, create_graph=True)  # wᵀ J, linear in w
    ju = _fill(_vjp_of(hs, ws, vs, create_graph, create_graph), outs, strict, "jvp", "output")
    outs, ju = _detach_all(outs, create_graph), _detach_all(ju, create_graph)
    return (outs if out_tuple else outs[0]), (ju if out_tuple else ju[0])


def jacobian(func: Callable, inputs, create_graph: bool = False, strict: bool = False):
    """∂func/∂inputs, entry [..out index.., ..input index..] = ∂out[i]/∂input[j]: shape
    ``out.shape + input.shape``; for tuples, ``J[i][j]`` for output i and input j (one level
    dropped where func returns one Tensor or takes one)."""
    in_tuple, xs = _variables(inputs, create_graph, "jacobian")
    out_tuple, outs = _call(func, xs, "jacobian")
    result = []
    for o in outs:
        rows: list[list[Tensor]] = [[] for _ in xs]
        flat = o.reshape(-1)
        for k in range(o.size):  # row k: the VJP with the k-th one-hot vector
            one = Tensor._wrap(o.data.reshape(-1)[k] * 0 + 1)
            grads = _vjp_of([flat[k]], xs, [one], create_graph)
            for j, g in enumerate(_fill(grads, xs, strict, "jacobian", "input")):
                rows[j].append(g if create_graph else g.detach())
        per_input = []
        for j, x in enumerate(xs):
            if rows[j]:
                block = stack(rows[j]).reshape(o.shape + x.shape)
            else:  # an output with no entries: an empty Jacobian
                block = Tensor._wrap(xp_of(x.data).zeros(o.shape + x.shape, dtype=x.dtype))
            per_input.append(block if create_graph else block.detach())
        result.append(tuple(per_input) if in_tuple else per_input[0])
    return tuple(result) if out_tuple else result[0]


def _gradient(func: Callable, xs, strict: bool, fn: str) -> tuple[Tensor, tuple[Tensor, ...]]:
    """(func(xs), its gradient in xs as a graph) for a func with one output entry."""
    _, outs = _call(func, xs, fn)
    if len(outs) != 1 or outs[0].size != 1:
        raise RuntimeError(
            f"{fn}: func must return one Tensor with one entry, not shapes "
            f"{[o.shape for o in outs]}"
        )
    one = Tensor._wrap(outs[0].data * 0 + 1)
    return outs[0], _fill(_vjp_of(outs, xs, [one], True), xs, strict, fn, "input")


def hessian(func: Callable, inputs, create_graph: bool = False, strict: bool = False):
    """∂²func/∂inputs² for a func with one output entry: shape ``input.shape * 2``; for a tuple
    of inputs, ``H[i][j]`` of shape ``input_i.shape + input_j.shape``: the Jacobian of the
    gradient."""
    in_tuple, inputs = _as_tuple(inputs, "input", "hessian")
    gradient = lambda *xs: _gradient(func, xs, strict, "hessian")[1]
    h = jacobian(gradient, tuple(inputs), create_graph=create_graph, strict=strict)
    return h if in_tuple else h[0][0]


def vhp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), vᵀ H) for a func with one output entry, v shaped like the input(s): the
    gradient of ∇func · v."""
    in_tuple, xs = _variables(inputs, create_graph, "vhp")
    out, first = _gradient(func, xs, strict, "vhp")
    vs = _match(v, xs, "vhp", "input")
    second = _fill(_vjp_of(first, xs, vs, create_graph), xs, strict, "vhp", "input")
    out, second = _detach_all([out], create_graph)[0], _detach_all(second, create_graph)
    return out, (second if in_tuple else second[0])


def hvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """(func(inputs), H v); equal to :func:`vhp` because the Hessian of a twice continuously
    differentiable function is symmetric."""
    return vhp(func, inputs, v, create_graph=create_graph, strict=strict)
