"""Elementwise ops: y = f(a) or y = f(a, b), applied entry by entry with broadcasting.

The local gradient of an elementwise op is diagonal, so each backward is one multiplication
``g * f'(·)``. When ``a`` and ``b`` broadcast, the returned gradient has the broadcast shape;
the engine sums it back to each input's shape (see ``Tensor.sum_to``).
"""

from __future__ import annotations

import numpy as np

from tensorlab.backend import is_float, to_device, xp_of
from tensorlab.function import Function
from tensorlab.tensor import Tensor, select

_const = Tensor._wrap


class Add(Function):
    """y = a + b;  da = g,  db = g."""

    def forward(ctx, a, b):
        return a + b

    def backward(ctx, g):
        return g, g


class Sub(Function):
    """y = a - b;  da = g,  db = -g."""

    def forward(ctx, a, b):
        return a - b

    def backward(ctx, g):
        return g, (-g if ctx.inputs[1].requires_grad else None)


class Mul(Function):
    """y = a * b;  da = g * b,  db = g * a."""

    def forward(ctx, a, b):
        return a * b

    def backward(ctx, g):
        a, b = ctx.inputs
        return (g * b if a.requires_grad else None), (g * a if b.requires_grad else None)


class Div(Function):
    """y = a / b;  da = g / b,  db = -g * a / b² = -g * y / b."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, b):
        return a / b

    def backward(ctx, g):
        a, b = ctx.inputs
        ga = g / b if a.requires_grad else None
        gb = -g * ctx.output / b if b.requires_grad else None
        return ga, gb


class Neg(Function):
    """y = -a;  da = -g."""

    def forward(ctx, a):
        return -a

    def backward(ctx, g):
        return -g


class PowScalar(Function):
    """y = a^p for a constant number p;  da = g * p * a^(p-1)."""

    def forward(ctx, a, p):
        ctx.p = p
        return a**p

    def backward(ctx, g):
        a, p = ctx.inputs[0], ctx.p
        if p == 0:  # d(a⁰)/da = 0 everywhere, also at a = 0 where a^(p-1) is inf
            return _const(xp_of(g.data).zeros_like(g.data))  # (0 also where g is inf, not NaN)
        if p == 2:
            return g * (2 * a)
        return g * (p * a ** (p - 1))


class Pow(Function):
    """y = a^b elementwise;  da = g * b * a^(b-1),  db = g * y * log(a)  (a > 0 for db).

    At a = 0 the formulas give 0 * inf = NaN in two places, where PyTorch takes the limits:
    da = 0 where b = 0 too (a⁰ = 1 for every a), and db = 0 where b ≥ 0 (0^b is constant
    for b > 0). Those entries read a safe base of 1 instead of a, so that no inf enters the
    graph and the second derivative has no NaN there either. At b = 0 and a ≠ 0 the formula
    gives da = 0 already, and its derivative in b, g/a, must survive: masked only where g is
    inf or NaN (0 there, as PyTorch, not g · 0 = NaN)."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, b):
        return a**b

    def backward(ctx, g):
        a, b = ctx.inputs
        ga = gb = None
        if a.requires_grad:
            flat = (b.data == 0) & ((a.data == 0) | ~xp_of(g.data).isfinite(g.data))
            ga = select(flat, 0.0, g * b * select(flat, 1.0, a) ** (b - 1))
        if b.requires_grad:
            flat = (a.data == 0) & (b.data >= 0)
            gb = select(flat, 0.0, g * ctx.output * select(flat, 1.0, a).log())
        return ga, gb


class Exp(Function):
    """y = exp(a);  da = g * y."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a):
        return xp_of(a).exp(a)

    def backward(ctx, g):
        return g * ctx.output


class Log(Function):
    """y = log(a);  da = g / a."""

    def forward(ctx, a):
        return xp_of(a).log(a)

    def backward(ctx, g):
        return g / ctx.inputs[0]


class Sqrt(Function):
    """y = √a;  da = g / (2y)."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a):
        return xp_of(a).sqrt(a)

    def backward(ctx, g):
        return g / (2 * ctx.output)


class Abs(Function):
    """y = |a|;  da = g * sign(a)  (0 at a = 0, a subgradient; and 0 at a = NaN, PyTorch's
    sign, where NumPy's would be NaN)."""

    def forward(ctx, a):
        return xp_of(a).abs(a)

    def backward(ctx, g):
        a = ctx.inputs[0].data
        return g * _const((a > 0).astype(g.dtype) - (a < 0).astype(g.dtype))


class Sin(Function):
    """y = sin(a);  da = g * cos(a)."""

    def forward(ctx, a):
        return xp_of(a).sin(a)

    def backward(ctx, g):
        return g * ctx.inputs[0].cos()


class Cos(Function):
    """y = cos(a);  da = -g * sin(a)."""

    def forward(ctx, a):
        return xp_of(a).cos(a)

    def backward(ctx, g):
        return -g * ctx.inputs[0].sin()


class Tanh(Function):
    """y = tanh(a);  da = g * (1 - y²)."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a):
        return xp_of(a).tanh(a)

    def backward(ctx, g):
        y = ctx.output
        return g * (1 - y * y)


def sigmoid_of(a):
    """sigmoid(a) = 1 / (1 + e^(-a)) of a raw float array, in its dtype, a few ulps from the
    true value everywhere: where a ≪ 0, e^(-a) is large and the quotient keeps every digit of
    the tiny result; past a ≈ -88 (float32) e^(-a) overflows to ∞ and 1/∞ = 0, the limit
    (NumPy's overflow warning is silenced: ∞ is meant). ½(1 + tanh(a/2)), the same function,
    subtracts two numbers near 1 where a ≪ 0 and loses the digits of the result."""
    xp = xp_of(a)
    e = xp.negative(a, out=xp.empty_like(a))  # (out=: a 0-d array stays an array)
    with np.errstate(over="ignore"):
        xp.exp(e, out=e)
    e += 1
    return xp.reciprocal(e, out=e)


class Sigmoid(Function):
    """y = sigmoid(a) = 1 / (1 + e^(-a));  da = g * y (1 - y). (:func:`sigmoid_of`: exact to a
    few ulps for every a, and no overflow error.)"""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a):
        if not is_float(a.dtype):  # integers: a float64 result, as NumPy's ufuncs give
            a = a.astype(np.float64)
        return sigmoid_of(a)

    def backward(ctx, g):
        y = ctx.output
        return g * (y * (1 - y))


# The masked backwards below *select* g where the mask holds and 0 elsewhere (``select``, a
# Where node), rather than multiply g by a 0/1 mask: an inf or NaN arriving at a masked entry
# then gives 0 there, as in PyTorch, not 0 · inf = NaN. A Where is differentiable in g, so the
# second derivative flows as before.


class ReLU(Function):
    """y = max(a, 0);  da = 0 where a ≤ 0, else g (also at a = NaN, as PyTorch)."""

    def forward(ctx, a):
        return xp_of(a).maximum(a, 0)

    def backward(ctx, g):
        return select(ctx.inputs[0].data <= 0, 0.0, g)


def _tie_split(ctx, g: Tensor, a, b) -> tuple:
    """(da, db) of max(a, b): g to the larger, ½ g to each where a == b, 0 to the smaller
    (min passes its inputs swapped). As in PyTorch, a NaN on either side (no order) sends g
    to both."""
    half = select(a == b, g * 0.5, g)
    ga = select(a < b, 0.0, half) if ctx.inputs[0].requires_grad else None
    gb = select(b < a, 0.0, half) if ctx.inputs[1].requires_grad else None
    return ga, gb


class Maximum(Function):
    """y = max(a, b);  da = g where a > b,  db = g where b > a,  else 0  (ties split ½–½)."""

    def forward(ctx, a, b):
        return xp_of(a).maximum(a, b)

    def backward(ctx, g):
        a, b = ctx.inputs
        return _tie_split(ctx, g, a.data, b.data)


class Minimum(Function):
    """y = min(a, b);  da = g where a < b,  db = g where b < a,  else 0  (ties split ½–½)."""

    def forward(ctx, a, b):
        return xp_of(a).minimum(a, b)

    def backward(ctx, g):
        a, b = ctx.inputs
        return _tie_split(ctx, g, b.data, a.data)  # max's comparisons, flipped


class Clip(Function):
    """y = min(max(a, lo), hi);  da = g where lo ≤ a ≤ hi, else 0."""

    def forward(ctx, a, lo, hi):
        ctx.lo, ctx.hi = lo, hi
        y = xp_of(a).clip(a, lo, hi)
        # a float tensor keeps its dtype (bfloat16 and Python floats); integers clipped to
        # a float bound become floats, as in PyTorch, not truncated back to integers
        return y.astype(a.dtype, copy=False) if is_float(a.dtype) else y

    def backward(ctx, g):
        a = ctx.inputs[0].data
        inside = xp_of(a).ones(a.shape, dtype=bool)
        if ctx.lo is not None:
            inside &= a >= ctx.lo
        if ctx.hi is not None:
            inside &= a <= ctx.hi
        return select(inside, g, 0.0)


class Where(Function):
    """y = a where cond else b;  da = g where cond else 0,  db = 0 where cond else g."""

    def forward(ctx, a, b, cond):
        ctx.cond = cond  # (CuPy's where gives float32 for two bfloat16 arrays: cast back)
        return xp_of(a).where(cond, a, b).astype(np.result_type(a.dtype, b.dtype), copy=False)

    def backward(ctx, g):
        a, b = ctx.inputs
        ga = select(ctx.cond, g, 0.0) if a.requires_grad else None
        gb = select(ctx.cond, 0.0, g) if b.requires_grad else None
        return ga, gb


class Cast(Function):
    """y = a converted to another float dtype;  da = g converted back."""

    def forward(ctx, a, dtype):
        return a.astype(dtype)

    def backward(ctx, g):
        return g.to(ctx.inputs[0].dtype)


class ToDevice(Function):
    """y = a copied to another device;  da = g copied back."""

    def forward(ctx, a, device):
        return to_device(a, device)

    def backward(ctx, g):
        return g.to(ctx.inputs[0].device)
