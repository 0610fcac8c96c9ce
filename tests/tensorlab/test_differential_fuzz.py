"""Differential fuzzing against PyTorch: random programs of 3 to 8 ops run in tensorlab and in
PyTorch side by side, in float64, and must agree.

A program starts from one to three leaf tensors whose shapes broadcast together (axes of size
0 and 1 included, 0-d too) and whose entries come from a small grid (so ties are common) or
anywhere in [-3, 3], with an occasional ±inf. Each step draws an op (elementwise unary and
binary with broadcasting, reductions over random axes, matmul against a new leaf, reshapes,
transposes, indexing, where, clamp, max/min, sort, softmax, ...) and applies it to tensors
made by earlier steps, in both libraries. The results must agree in shape and value (NaN
equals NaN, infinities must match exactly); an op that raises in both counts as agreement
(the step is dropped), one that raises in one library only is a failure. At the end the
gradients of a random weighted sum of every tensor the program made must agree at every
leaf, and, for the second test, the second derivatives too (the gradient of grad · v, for a
random v). A leaf that gets no gradient on one side and zeros on the other agrees.

Where the libraries differ on purpose, or PyTorch disagrees with itself, the programs steer
clear, each for a stated reason:

- Mixed advanced indexing (docs/derivations_nn.md, "Differences from PyTorch"): an index
  array goes on one axis, with slices elsewhere.
- ``max``/``min`` over an axis with ties: ``torch.max(x, dim)`` sends the gradient to one
  index, tensorlab splits it. The reference is ``torch.amax``/``torch.amin``, which split too,
  with the backward of ``torch.max(x)``: selecting, so an infinite gradient gives 0 at the
  other entries (``torch.amax``'s own backward multiplies its mask: NaN there).
- Signed zeros: every tensor a program makes, and every leaf, goes through ``+ 0.0`` in both
  libraries (-0 becomes +0, nothing else changes). A zero result's sign can differ (a running
  sum of -0 is -0 in NumPy, +0 in PyTorch's 1-D cumsum; BLAS and NumPy differ on 0 · -2 in a
  product), and 1/x or the slopes of sqrt and log would make that inf against -inf.
- A power's base is never 0 or -inf (they become 0.5 and -1e300): at a base of -0 or -inf and
  a non-integer exponent NumPy's power (a square root for 0.5) gives -0 or NaN where C's pow,
  and PyTorch, give +0 or inf; at a base of 0 PyTorch's gradient in the exponent multiplies a
  0/1 mask (NaN under an infinite gradient) where tensorlab selects (0), as both do for the
  base. tests/tensorlab/test_torch_parity.py checks powers at a base of 0.
- ``prod`` over every axis is compared with ``torch.prod`` of the flattened tensor along dim
  0: ``torch.prod(x)``'s first-order backward takes a shortcut with two or more zeros (a zero
  gradient, also beside an inf, where the product of the others is 0 · inf) that its per-axis
  form and its second-order backward do not take.
- ``var``/``std`` take ``ddof=1`` only where more than one entry is reduced: for N ≤ ddof
  PyTorch's gradients differ between its full and per-axis forms (``Var``'s docstring).
- ``torch.cat`` skips 1-D empty tensors whatever the other shapes (a legacy rule): the
  programs concatenate no tensor of shape (0,).
- In the second-derivative test a power a**b keeps b off 0 (b + 1e-4): there PyTorch masks
  da = g b a^(b-1) to a constant 0, which loses its derivative in b, g / a; tensorlab keeps
  it (``tensorlab/ops/elementwise.py: Pow``), and is right.
- Second derivatives are compared only in programs whose first derivatives are finite on
  both sides. Past an infinite slope they are 0 · inf in orders that differ: PyTorch's double
  backwards send explicit zero gradients (a ReLU's or a where's mask has derivative 0, sent
  on as a tensor of zeros) that meet the infinity (NaN) where tensorlab sends none, and
  products that mix 0 and inf (a ``prod`` of zeros beside a sqrt's slope at 0) give NaN or
  ±inf by the order of the multiplications. And where PyTorch's second derivative is NaN,
  tensorlab's may be a number: the standard deviation of one entry is 0 for every x, so its
  second derivative is 0 (tensorlab's ``Std`` backward reads a safe y where y = 0), while
  PyTorch's double backward divides by 2y = 0 before it masks the entry (NaN).

CI runs the hypothesis profile's number of programs (tests/conftest.py); for a long run by
hand, ``TENSORLAB_FUZZ_EXAMPLES=20000 pytest tests/tensorlab/test_differential_fuzz.py``.
Skipped without torch.
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl

torch = pytest.importorskip(
    "torch", reason="the differential fuzzer compares against PyTorch (pip install torch)"
)

TOL = dict(rtol=1e-7, atol=1e-9)
GRID = [-2.0, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 2.0, 3.0]
# an entry: from the grid (ties), anywhere in [-3, 3], or (1 in 40) an infinity
ENTRIES = st.integers(0, 39).flatmap(
    lambda k: (
        st.sampled_from([math.inf, -math.inf])
        if k == 0
        else st.sampled_from(GRID)
        if k < 22
        else st.floats(-3.0, 3.0).map(lambda v: round(v, 3))  # (no 1e-200: no overflow games)
    )
)
WEIGHTS = st.sampled_from([-1.5, -1.0, -0.5, 0.5, 1.0, 2.0, 0.25])
EXAMPLES = os.environ.get("TENSORLAB_FUZZ_EXAMPLES")
fuzz_settings = settings(max_examples=int(EXAMPLES)) if EXAMPLES else settings()


class Disagree(AssertionError):
    pass


def _np(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t
    if isinstance(t, tl.Tensor):
        return t.numpy()
    return t.detach().numpy(force=True)  # (force: PyTorch's ZeroTensors)


def assert_same(ours, theirs, what: str, program: list[str], torch_nan_any=False) -> None:
    """Equal shapes and values (NaN = NaN; infinities exactly). With ``torch_nan_any`` (second
    derivatives, see the module docstring) an entry where PyTorch has NaN may hold anything."""
    a, b = _np(ours), _np(theirs)
    if torch_nan_any and a.shape == b.shape:
        a = np.where(np.isnan(b), b, a)
    if a.shape != b.shape:
        raise Disagree(f"{what}: shape {a.shape} here, {b.shape} in PyTorch\n" + "\n".join(program))
    try:
        np.testing.assert_allclose(a, b, equal_nan=True, **TOL)
    except AssertionError as e:
        raise Disagree(f"{what}:\n{e}\nprogram:\n" + "\n".join(program)) from None


class TorchExtremum(torch.autograd.Function):
    """torch.amax / torch.amin values; the gradient split evenly among the entries that attain
    the extreme and *selected* (where, not a 0/1 product): torch.max()'s backward
    (evenly_distribute_backward), over any dims. Differentiable in g, for second order."""

    @staticmethod
    def forward(ctx, x, dims, keepdim, largest):
        y = (torch.amax if largest else torch.amin)(x, dims, keepdim=True)
        ctx.save_for_backward(x, y)
        ctx.dims, ctx.keepdim = dims, keepdim
        return y if keepdim else y.squeeze(dims) if dims else y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        if not ctx.keepdim and ctx.dims:
            g = g.reshape(y.shape)
        hit = (x == y) | (x.isnan() & y.isnan())
        count = hit.sum(ctx.dims, keepdim=True) if ctx.dims else hit.to(x.dtype)
        return torch.where(hit, g / count, torch.zeros((), dtype=x.dtype)), None, None, None


# ---------------------------------------------------------------------- the ops
# Each op draws its parameters, then returns (text, ours, theirs): two thunks that compute the
# result from the pool's tensors, or None when no tensor in the pool suits it.


def pick(data, pool, min_ndim: int = 0, label: str = "x"):
    fits = [i for i, p in enumerate(pool) if p[0].ndim >= min_ndim]
    if not fits:
        return None
    i = data.draw(st.sampled_from(fits), label=label)
    return i, pool[i][0], pool[i][1]


def draw_axis(data, ndim: int, allow_none: bool = True, allow_tuple: bool = True):
    choices = [st.integers(-ndim, ndim - 1)] if ndim else []
    if allow_none:
        choices.append(st.none())
    if allow_tuple and ndim:
        choices.append(
            st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(
                lambda axes: tuple(a - ndim if a % 2 else a for a in axes)
            )
        )
    return data.draw(st.one_of(*choices), label="axis") if choices else None


UNARY = {
    "neg": (lambda x: -x, lambda x: -x),
    "exp": (tl.exp, torch.exp),
    "log": (tl.log, torch.log),
    "sqrt": (tl.sqrt, torch.sqrt),
    "abs": (tl.abs, torch.abs),
    "tanh": (tl.tanh, torch.tanh),
    "sigmoid": (tl.sigmoid, torch.sigmoid),
    "sin": (tl.sin, torch.sin),
    "cos": (tl.cos, torch.cos),
    "relu": (tl.relu, torch.relu),
    "square": (lambda x: x**2, lambda x: x**2),
    "cube": (lambda x: x**3, lambda x: x**3),
    "pow0": (lambda x: x**0, lambda x: x**0),
    "pow1.5": (lambda x: base(x) ** 1.5, lambda x: base(x) ** 1.5),
    "reciprocal": (lambda x: 1.0 / x, lambda x: 1.0 / x),
    "scale": (lambda x: x * 0.5 - 1.0, lambda x: x * 0.5 - 1.0),
}
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "maximum": (tl.maximum, torch.maximum),
    "minimum": (tl.minimum, torch.minimum),
    "pow": (lambda a, b: base(a) ** b, lambda a, b: base(a) ** b),
}


def base(x):
    """A power's base with 0 replaced by 0.5 and -inf by -1e300 (see the module docstring)."""
    return x.masked_fill(x == 0, 0.5).clamp(-1e300, None)


def op_unary(data, pool):
    name = data.draw(st.sampled_from(sorted(UNARY)), label="unary")
    i, x, xt = pick(data, pool)
    f, ft = UNARY[name]
    return f"{name}(t{i})", lambda: f(x), lambda: ft(xt)


def op_binary(data, pool):
    name = data.draw(st.sampled_from(sorted(BINARY)), label="binary")
    i, a, at = pick(data, pool, label="a")
    j, b, bt = pick(data, pool, label="b")
    f, ft = BINARY[name]
    if name == "pow" and SECOND_ORDER[0]:  # an exponent not 0 (see the module docstring)
        return f"pow(t{i}, t{j} + 1e-4)", lambda: f(a, b + 1e-4), lambda: ft(at, bt + 1e-4)
    return f"{name}(t{i}, t{j})", lambda: f(a, b), lambda: ft(at, bt)


def op_scalar(data, pool):
    i, x, xt = pick(data, pool)
    c = data.draw(st.sampled_from([0.0, 1.0, -2.0, 0.5]), label="c")
    kind = data.draw(st.sampled_from(["rsub", "rdiv", "rpow", "gt-mask"]), label="kind")
    if kind == "rsub":
        return f"{c} - t{i}", lambda: c - x, lambda: c - xt
    if kind == "rdiv":
        return f"{c} / t{i}", lambda: c / x, lambda: c / xt
    if kind == "rpow":
        base = abs(c) + 0.5
        return f"{base} ** t{i}", lambda: base**x, lambda: base**xt
    return (
        f"masked_fill(t{i}, t{i} > {c}, -1)",
        lambda: x.masked_fill(x > c, -1.0),
        lambda: xt.masked_fill(xt > c, -1.0),
    )


def op_reduce(data, pool):
    name = data.draw(
        st.sampled_from(["sum", "mean", "max", "min", "var", "std", "prod", "logsumexp"]),
        label="reduction",
    )
    i, x, xt = pick(data, pool)
    single = name == "prod"  # torch.prod takes one dim
    axis = draw_axis(data, x.ndim, allow_tuple=not single)
    keep = data.draw(st.booleans(), label="keepdims")
    text = f"t{i}.{name}(axis={axis}, keepdims={keep})"
    dims = tuple(range(xt.ndim)) if axis is None else axis
    if name in ("sum", "mean"):
        return text, lambda: getattr(x, name)(axis, keep), lambda: getattr(xt, name)(dims, keep)
    if name in ("max", "min"):
        dims = dims if isinstance(dims, tuple) else (dims,)
        return (
            text,
            lambda: getattr(x, name)(axis, keep),
            lambda: TorchExtremum.apply(xt, dims, keep, name == "max"),
        )
    if name in ("var", "std"):
        axes = range(x.ndim) if axis is None else axis if isinstance(axis, tuple) else (axis,)
        count = math.prod(x.shape[a] for a in axes)  # ddof 1 only where N > 1 (docstring)
        ddof = data.draw(st.sampled_from([0, 1]), label="ddof") if count > 1 else 0
        return (
            f"{text[:-1]}, ddof={ddof})",
            lambda: getattr(x, name)(axis, keep, ddof),
            lambda: getattr(xt, name)(dims, correction=ddof, keepdim=keep),
        )
    if name == "prod":
        if axis is None:  # (over the flattened tensor: see the module docstring)
            full = (1,) * xt.ndim if keep else ()
            flat = (lambda: xt.prod()) if xt.ndim == 0 else (lambda: xt.reshape(-1).prod(0))
            return text, lambda: x.prod(None, keep), lambda: flat().reshape(full)
        return text, lambda: x.prod(axis, keep), lambda: xt.prod(axis, keepdim=keep)
    return text, lambda: x.logsumexp(axis, keep), lambda: xt.logsumexp(dims, keepdim=keep)


def op_softmax(data, pool):
    found = pick(data, pool)
    if found is None:
        return None
    i, x, xt = found
    axis = data.draw(st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1), label="axis")
    log = data.draw(st.booleans(), label="log")
    f, ft = (tl.log_softmax, torch.log_softmax) if log else (tl.softmax, torch.softmax)
    return f"{f.__name__}(t{i}, {axis})", lambda: f(x, axis), lambda: ft(xt, axis)


def op_cumsum(data, pool):
    i, x, xt = pick(data, pool)
    axis = data.draw(st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1), label="axis")
    return f"cumsum(t{i}, {axis})", lambda: x.cumsum(axis), lambda: xt.cumsum(axis)


def op_matmul(data, pool):
    """x @ W for a new leaf W (or W @ x), shaped to fit; or x @ y for two tensors of the pool
    (then a shape mismatch raises in both)."""
    i, x, xt = pick(data, pool)
    kind = data.draw(st.sampled_from(["right", "left", "pool"]), label="matmul")
    if kind == "pool":
        j, y, yt = pick(data, pool, label="y")
        return f"t{i} @ t{j}", lambda: x @ y, lambda: xt @ yt
    if x.ndim == 0:
        return None
    m = data.draw(st.integers(0, 3), label="m")
    vector = data.draw(st.booleans(), label="vector")
    if kind == "right":
        shape = (x.shape[-1],) if vector else (x.shape[-1], m)
    else:
        shape = (
            (x.shape[-2 if x.ndim > 1 else -1],)
            if vector
            else (m, x.shape[-2 if x.ndim > 1 else -1])
        )
    w = data.draw(hnp.arrays(np.float64, shape, elements=ENTRIES), label="W")
    wl, wt = new_leaf(w)
    if kind == "right":
        return f"t{i} @ leaf{shape}", lambda: x @ wl, lambda: xt @ wt
    return f"leaf{shape} @ t{i}", lambda: wl @ x, lambda: wt @ xt


def op_shape(data, pool):
    i, x, xt = pick(data, pool)
    nd = x.ndim
    kinds = ["reshape-1", "unsqueeze", "expand"] + (
        ["transpose", "permute", "flatten", "flip", "roll", "squeeze"] if nd else []
    )
    kinds += ["tril", "triu", "mT"] if nd >= 2 else []
    kind = data.draw(st.sampled_from(kinds), label="shape op")
    if kind == "reshape-1":
        return f"t{i}.reshape(-1)", lambda: x.reshape(-1), lambda: xt.reshape(-1)
    if kind == "unsqueeze":
        a = data.draw(st.integers(-nd - 1, nd), label="axis")
        return f"t{i}.unsqueeze({a})", lambda: x.unsqueeze(a), lambda: xt.unsqueeze(a)
    if kind == "expand":
        lead = data.draw(st.integers(0, 2), label="lead")
        shape = (lead,) + tuple(data.draw(st.integers(0, 2)) if n == 1 else n for n in x.shape)
        return f"t{i}.expand{shape}", lambda: x.expand(shape), lambda: xt.expand(shape)
    if kind == "transpose":
        a, b = (data.draw(st.integers(-nd, nd - 1), label=k) for k in "ab")
        return f"t{i}.transpose({a}, {b})", lambda: x.transpose(a, b), lambda: xt.transpose(a, b)
    if kind == "permute":
        order = tuple(data.draw(st.permutations(range(nd)), label="order"))
        return f"t{i}.permute{order}", lambda: x.permute(order), lambda: xt.permute(order)
    if kind == "flatten":
        a, b = sorted(data.draw(st.integers(0, nd - 1), label=k) for k in "ab")
        return f"t{i}.flatten({a}, {b})", lambda: x.flatten(a, b), lambda: xt.flatten(a, b)
    if kind == "flip":
        a = data.draw(st.integers(-nd, nd - 1), label="axis")
        return f"t{i}.flip({a})", lambda: x.flip(a), lambda: xt.flip(a)
    if kind == "roll":
        s, a = data.draw(st.integers(-3, 3), label="shift"), data.draw(st.integers(0, nd - 1))
        return f"t{i}.roll({s}, {a})", lambda: x.roll(s, a), lambda: xt.roll(s, a)
    if kind == "squeeze":
        ones = [a for a, n in enumerate(x.shape) if n == 1]
        if not ones:
            return None
        a = data.draw(st.sampled_from(ones), label="axis")
        return f"t{i}.squeeze({a})", lambda: x.squeeze(a), lambda: xt.squeeze(a)
    if kind == "mT":
        return f"t{i}.mT", lambda: x.mT, lambda: xt.mT
    k = data.draw(st.integers(-2, 2), label="k")
    return f"t{i}.{kind}({k})", lambda: getattr(x, kind)(k), lambda: getattr(xt, kind)(k)


def op_index(data, pool):
    found = pick(data, pool, min_ndim=1)
    if found is None:
        return None
    i, x, xt = found
    kind = data.draw(st.sampled_from(["basic", "array", "mask", "gather"]), label="index")
    if kind == "basic":
        key = []
        for n in x.shape[: data.draw(st.integers(1, x.ndim), label="depth")]:
            if n and data.draw(st.booleans(), label="int?"):
                key.append(data.draw(st.integers(-n, n - 1), label="int"))
            else:
                start = data.draw(st.none() | st.integers(-4, 4), label="start")
                stop = data.draw(st.none() | st.integers(-4, 4), label="stop")
                key.append(slice(start, stop, data.draw(st.sampled_from([None, 1, 2]))))
        if data.draw(st.booleans(), label="newaxis"):
            key.insert(data.draw(st.integers(0, len(key)), label="at"), None)
        key = tuple(key)
        return f"t{i}[{key}]", lambda: x[key], lambda: xt[key]
    axis = data.draw(st.integers(0, x.ndim - 1), label="axis")
    n = x.shape[axis]
    if kind == "array":  # one index array; slices elsewhere (NumPy and PyTorch agree there)
        idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), max_size=4)) if n else [], int)
        if axis == 0 and data.draw(st.booleans(), label="as a list"):
            return f"t{i}[{idx.tolist()}]", lambda: x[idx.tolist()], lambda: xt[idx.tolist()]
        key = (slice(None),) * axis + (idx,)
        tkey = (slice(None),) * axis + (torch.tensor(idx),)
        return f"t{i}[{':, ' * axis}{idx.tolist()}]", lambda: x[key], lambda: xt[tkey]
    if kind == "mask":
        mask = data.draw(hnp.arrays(np.bool_, x.shape), label="mask")
        return f"t{i}[mask]", lambda: x[tl.tensor(mask)], lambda: xt[torch.tensor(mask)]
    shape = tuple(
        (data.draw(st.integers(0, 3)) if a == axis else data.draw(st.integers(0, m)))
        for a, m in enumerate(x.shape)
    )
    if n == 0:
        shape = shape[:axis] + (0,) + shape[axis + 1 :]
    idx = data.draw(hnp.arrays(np.int64, shape, elements=st.integers(0, max(n - 1, 0))))
    return (
        f"t{i}.gather({axis}, {idx.tolist()})",
        lambda: x.gather(axis, idx),
        lambda: xt.gather(axis, torch.tensor(idx)),
    )


def op_where_clamp(data, pool):
    kind = data.draw(st.sampled_from(["where", "clamp", "sort", "cat", "stack"]), label="kind")
    i, x, xt = pick(data, pool)
    if kind == "where":
        j, c, ct = pick(data, pool, label="cond from")
        k, y, yt = pick(data, pool, label="y")
        v = data.draw(st.sampled_from([0.0, 0.5, -1.0]), label="v")
        return (
            f"where(t{j} > {v}, t{i}, t{k})",
            lambda: tl.where(c > v, x, y),
            lambda: torch.where(ct > v, xt, yt),
        )
    if kind == "clamp":
        lo, hi = (data.draw(st.none() | st.sampled_from(GRID[:-1]), label=k) for k in "lh")
        if lo is None and hi is None:
            lo = 0.0
        return f"clamp(t{i}, {lo}, {hi})", lambda: x.clamp(lo, hi), lambda: xt.clamp(lo, hi)
    if kind == "sort":
        if x.ndim == 0:
            return None
        a = data.draw(st.integers(-x.ndim, x.ndim - 1), label="axis")
        desc = data.draw(st.booleans(), label="descending")
        return (
            f"sort(t{i}, {a}, descending={desc}).values",
            lambda: x.sort(a, desc).values,
            lambda: torch.sort(xt, dim=a, descending=desc, stable=True).values,
        )
    j, y, yt = pick(data, pool, label="y")
    if kind == "cat" and (0,) in (x.shape, y.shape):
        return None  # PyTorch's legacy rule: torch.cat skips 1-D empty tensors, any shape beside
    a = data.draw(st.integers(-2, 2), label="axis")
    f, ft = (tl.cat, torch.cat) if kind == "cat" else (tl.stack, torch.stack)
    return f"{kind}([t{i}, t{j}], {a})", lambda: f([x, y], a), lambda: ft([xt, yt], a)


OPS = [op_unary, op_binary, op_scalar, op_reduce, op_softmax, op_cumsum, op_matmul, op_shape,
       op_index, op_where_clamp]  # fmt: skip


def new_leaf(array):
    """A new float64 leaf in both libraries, recorded in LEAVES (whose gradients are compared)."""
    ours = tl.tensor(array, dtype="float64", requires_grad=True)
    theirs = torch.tensor(array, requires_grad=True)
    LEAVES.append((ours, theirs))
    return ours, theirs


LEAVES: list = []  # the current program's leaves (a program runs at a time)
SECOND_ORDER = [False]  # whether the current program's second derivatives are compared


def run_program(data, second_order: bool) -> None:
    LEAVES.clear()
    SECOND_ORDER[0] = second_order
    shapes = data.draw(
        hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3),
        label="shapes",
    ).input_shapes
    n_inputs = data.draw(st.integers(1, 3), label="inputs")
    pool, program = [], []
    for k, shape in enumerate(shapes[:n_inputs]):
        a = data.draw(hnp.arrays(np.float64, shape, elements=ENTRIES), label=f"t{k}") + 0.0
        pool.append(new_leaf(a))
        program.append(f"t{k} = leaf({a.tolist()})")
    made = []
    for _ in range(data.draw(st.integers(3, 8), label="steps")):
        step = data.draw(st.sampled_from(OPS), label="op")(data, pool)
        if step is None:
            continue
        text, ours, theirs = step
        errors = []
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                y = ours()
            except Exception as e:  # noqa: BLE001 - any error: compared with PyTorch's below
                errors.append(f"tensorlab: {type(e).__name__}: {e}")
                y = None
            try:
                yt = theirs()
            except Exception as e:  # noqa: BLE001
                errors.append(f"PyTorch: {type(e).__name__}: {e}")
                yt = None
        if y is None and yt is None:
            continue  # both refuse: agreement
        if y is None or yt is None:
            raise Disagree(f"{text}: only one raises: {errors[0]}\nprogram:\n" + "\n".join(program))
        program.append(f"t{len(pool)} = {text}")
        assert_same(y, yt, f"value of {text}", program)
        y, yt = y + 0.0, yt + 0.0  # -0 becomes +0 in both (see the module docstring)
        pool.append((y, yt))
        made.append((y, yt))
    check_gradients(data, made, program, second_order)


def check_gradients(data, made, program, second_order: bool) -> None:
    made = [(y, yt) for y, yt in made if y.requires_grad and yt.requires_grad]
    if not made:
        return
    xs, ts = [p[0] for p in LEAVES], [p[1] for p in LEAVES]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        loss, loss_t = 0.0, 0.0
        for y, yt in made:
            w = data.draw(WEIGHTS, label="weight")
            loss, loss_t = loss + (y * w).sum(), loss_t + (yt * w).sum()
        ours = tl.grad(loss, xs, create_graph=second_order, allow_unused=True)
        theirs = torch.autograd.grad(loss_t, ts, create_graph=second_order, allow_unused=True)
        for k, (g, gt, x) in enumerate(zip(ours, theirs, xs)):
            g = np.zeros(x.shape) if g is None else g
            gt = np.zeros(x.shape) if gt is None else gt
            assert_same(g, gt, f"gradient of leaf {k}", program)
        finite = all(np.isfinite(_np(g)).all() for g in (*ours, *theirs) if g is not None)
        if not second_order or not finite:  # (no second order past an infinite slope: docstring)
            return
        terms, terms_t = [], []
        for g, gt, x in zip(ours, theirs, xs):
            v = data.draw(hnp.arrays(np.float64, x.shape, elements=st.sampled_from(GRID[:-1])))
            if g is not None and g.requires_grad:
                terms.append((g * tl.tensor(v, dtype="float64")).sum())
            if gt is not None and gt.requires_grad:
                terms_t.append((gt * torch.tensor(v)).sum())
        second = _grads(terms, xs, tl.grad)
        second_t = _grads(terms_t, ts, torch.autograd.grad)
        for k, (h, ht, x) in enumerate(zip(second, second_t, xs)):
            h = np.zeros(x.shape) if h is None else h
            ht = np.zeros(x.shape) if ht is None else ht
            what = f"second derivative (grad of grad·v) at leaf {k}"
            assert_same(h, ht, what, program, torch_nan_any=True)


def _grads(terms, inputs, grad):
    """d(Σ terms)/d(inputs), None where nothing flows (no term at all: every one None)."""
    if not terms:
        return [None] * len(inputs)
    return grad(sum(terms[1:], terms[0]), inputs, allow_unused=True)


@fuzz_settings
@given(data=st.data())
def test_random_programs_agree_with_pytorch_in_values_and_gradients(data):
    run_program(data, second_order=False)


@fuzz_settings
@given(data=st.data())
def test_random_programs_agree_with_pytorch_in_second_derivatives(data):
    run_program(data, second_order=True)
