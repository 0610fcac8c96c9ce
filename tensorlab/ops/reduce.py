"""Reductions over one or more axes: sum, mean, max, min, var, std, prod, logsumexp; and
cumsum, the running sum along one axis.

A reduction maps many entries to one, so its backward sends ``g`` back to every entry that
was reduced: ``g`` is reshaped to the kept-dims shape (a 1 where each reduced axis was) and
broadcast over the input. What differs between reductions is the weight each entry gets.
"""

from __future__ import annotations

import math

import numpy as np

from tensorlab.backend import acc_dtype, is_float, xp_of
from tensorlab.function import Function
from tensorlab.tensor import Tensor, axes_index, select

_const = Tensor._wrap


def _reduce_setup(ctx, a, axis, keepdims) -> None:
    """Store what every backward needs: the axes reduced, their entry count, the kept-dims
    shape and the output's."""
    axes = axes_index(type(ctx).__name__.lower(), axis, a.ndim)
    ctx.axis = axes if axis is not None else None
    ctx.keepdims = keepdims
    ctx.kshape = tuple(1 if i in axes else n for i, n in enumerate(a.shape))
    ctx.out_shape = (
        ctx.kshape if keepdims else tuple(n for i, n in enumerate(a.shape) if i not in axes)
    )
    ctx.count = math.prod(a.shape[i] for i in axes)


def _spread(ctx, g: Tensor) -> Tensor:
    """``g`` reshaped to keep-dims and broadcast over the input's shape. (Where only leading
    axes were reduced, a sum over everything the most common, broadcasting puts the 1s back
    by itself: no reshape.)"""
    if not ctx.keepdims and ctx.axis is not None and ctx.axis != tuple(range(len(ctx.axis))):
        g = g.reshape(ctx.kshape)
    return g.expand(ctx.inputs[0].shape)


class Sum(Function):
    """y = Σ_axis a;  da = g broadcast over the reduced axes."""

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        acc = acc_dtype(a)  # float16 sums in float32
        y = a.sum(axis=ctx.axis, keepdims=keepdims, dtype=acc)
        return y if acc is None else y.astype(a.dtype)

    def backward(ctx, g):
        return _spread(ctx, g)


class Mean(Function):
    """y = (1/N) Σ_axis a;  da = g / N broadcast over the reduced axes."""

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        if ctx.count == 0:  # the mean of nothing: NaN, as NumPy (without its warning)
            return xp_of(a).full(ctx.out_shape, xp_of(a).nan, dtype=a.dtype)
        acc = acc_dtype(a)
        y = a.mean(axis=ctx.axis, keepdims=keepdims, dtype=acc)
        return y if acc is None else y.astype(a.dtype)

    def backward(ctx, g):
        return _spread(ctx, g / ctx.count if ctx.count else g)  # (no entries: an empty grad)


class _Extremum(Function):
    """Shared backward of max and min: the gradient goes to the entries that attain the
    extreme value, split evenly among ties:  da = g / #ties where a = y, else 0 (selected,
    not multiplied by a 0/1 mask: an inf in g stays at the extreme entries and the others
    get 0, not 0 · inf = NaN). A NaN extreme is attained by the NaN entries, as in PyTorch."""

    saves_output = True  # backward reads ctx.output

    def backward(ctx, g):
        a = ctx.inputs[0].data
        y = ctx.output.data
        if not ctx.keepdims:
            y = y.reshape(ctx.kshape)
        hit = (a == y) | ((a != a) & (y != y))  # (x != x: x is NaN)
        per_tie = 1.0 / hit.sum(axis=ctx.axis, keepdims=True)
        return select(hit, _spread(ctx, g) * _const(per_tie.astype(a.dtype)), 0.0)


class Max(_Extremum):
    """y = max_axis a;  da = g at the argmax entries (ties share it), 0 elsewhere."""

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        return a.max(axis=ctx.axis, keepdims=keepdims)


class Min(_Extremum):
    """y = min_axis a;  da = g at the argmin entries (ties share it), 0 elsewhere."""

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        return a.min(axis=ctx.axis, keepdims=keepdims)


def _centered(ctx) -> Tensor:
    a = ctx.inputs[0]
    if not a.size:  # an empty input has an empty gradient (and no mean to take)
        return a * 0.0
    return a - a.mean(axis=ctx.axis, keepdims=True)


def _per_dof(ctx) -> float:
    """1/(N - ddof), taken as 1/0 = inf when no degrees of freedom are left (N ≤ ddof), as
    PyTorch, which divides by max(N - ddof, 0)."""
    dof = ctx.count - ctx.ddof
    return 1.0 / dof if dof > 0 else float("inf")


def _moment(ctx, xp, a, axis, keepdims, ddof):
    """Σ_axis (a - ā)² / (N - ddof), without NumPy's warnings. For N ≤ ddof the sum is
    divided by 0, as in PyTorch: inf, or NaN where the sum is 0 too (a constant slice, a
    single entry, an empty axis)."""
    _reduce_setup(ctx, a, axis, keepdims)
    ctx.ddof = ddof
    if ctx.count == 0:
        return xp.full(ctx.out_shape, xp.nan, dtype=a.dtype)
    acc = acc_dtype(a)
    if ctx.count - ddof <= 0:
        y = a.var(axis=ctx.axis, keepdims=keepdims, dtype=acc)  # Σ (a - ā)² / N
        with np.errstate(invalid="ignore"):
            y = y * xp.asarray(float("inf"), dtype=y.dtype)  # ... / 0: inf, or 0 · inf = NaN
    else:
        y = a.var(axis=ctx.axis, keepdims=keepdims, ddof=ddof, dtype=acc)
    return y if acc is None else y.astype(a.dtype)


class Var(Function):
    """y = Σ_axis (a - ā)² / (N - ddof);  da = g * 2 (a - ā) / (N - ddof).

    (The term from ā's own dependence on a vanishes because Σ (a - ā) = 0.) Where N ≤ ddof
    the value is inf (NaN for a constant slice), as in PyTorch, and 1/(N - ddof) is taken as
    inf in the gradient too: ±inf, NaN where a = ā. (PyTorch's own gradient there is +inf
    for a full reduction and finite for N < ddof over an axis.)
    """

    def forward(ctx, a, axis, keepdims, ddof):
        return _moment(ctx, xp_of(a), a, axis, keepdims, ddof)

    def backward(ctx, g):
        return _spread(ctx, g) * _centered(ctx) * (2.0 * _per_dof(ctx))


class Std(Function):
    """y = √(Σ_axis (a - ā)² / (N - ddof));  da = g * (a - ā) / ((N - ddof) y),
    taken as 0 where y = 0 (a constant slice: PyTorch's choice, a subgradient). Where
    N ≤ ddof, y is inf (NaN for a constant slice) and the gradient NaN, as in PyTorch."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis, keepdims, ddof):
        xp = xp_of(a)
        return xp.sqrt(_moment(ctx, xp, a, axis, keepdims, ddof))

    def backward(ctx, g):
        y = ctx.output
        zero = y.data == 0
        g_over_y = select(zero, 0.0, g / select(zero, 1.0, y))
        return _spread(ctx, g_over_y) * _centered(ctx) * _per_dof(ctx)


class Prod(Function):
    """y = Π_axis a;  da_i = g * Π_{j≠i} a_j, which is g * y / a_i where no a_j is 0.

    With a zero among the entries, y / a_i is 0/0 there; the backward then forms each
    leave-one-out product directly (:func:`_products_of_others`).
    """

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        acc = acc_dtype(a)
        y = a.prod(axis=ctx.axis, keepdims=keepdims, dtype=acc)
        return y if acc is None else y.astype(a.dtype)

    def backward(ctx, g):
        a = ctx.inputs[0]
        if a.ndim == 0:  # y = a: the product of no others is 1 (y / a would be NaN at a = ±inf)
            return g
        if not (a.data == 0).any():
            return _spread(ctx, g) * _spread(ctx, ctx.output) / a
        return _spread(ctx, g) * _products_of_others(a, ctx.axis)


def _products_of_others(a: Tensor, axes: tuple | None) -> Tensor:
    """Π_{j≠i} a_j over the reduced ``axes`` (None: all), for every i, as Tensor ops:
    move the reduced axes last and flatten them to one axis of N, copy each row N times with
    entry i replaced by 1 (an N×N pattern), take the product of each copy. O(N²) memory: used
    only when an entry is 0."""
    reduced = list(range(a.ndim)) if axes is None else list(axes)
    kept = [i for i in range(a.ndim) if i not in reduced]
    moved = a.permute(kept + reduced) if a.ndim else a
    lead = moved.shape[: len(kept)]
    rows = moved.reshape(lead + (-1,))
    n = rows.shape[-1]
    eye = xp_of(a.data).eye(n, dtype=bool)
    others = select(eye, 1.0, rows.unsqueeze(-2).expand(lead + (n, n))).prod(axis=-1)
    back = others.reshape(moved.shape)
    if not a.ndim:
        return back
    inverse = [0] * a.ndim
    for i, ax in enumerate(kept + reduced):
        inverse[ax] = i
    return back.permute(inverse)


class Cumsum(Function):
    """y_i = Σ_{j ≤ i} a_j along ``axis``;  da_j = Σ_{i ≥ j} g_i, the running sum of g taken
    from the far end: flip(cumsum(flip(g)))."""

    def forward(ctx, a, axis):
        ctx.axis = axis
        acc = acc_dtype(a)
        y = xp_of(a).cumsum(a, axis=axis, dtype=acc)
        return y if acc is None else y.astype(a.dtype)

    def backward(ctx, g):
        return g.flip(ctx.axis).cumsum(ctx.axis).flip(ctx.axis)


class LogSumExp(Function):
    """y = log Σ_axis exp(a), computed as m + log Σ exp(a - m) with m = max a (no overflow);
    da = g * exp(a - y) = g * softmax(a)."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        xp = xp_of(a)
        if a.size == 0:  # log of an empty sum: -inf (an empty result if a kept axis is empty)
            return xp.full(ctx.out_shape, -xp.inf, dtype=a.dtype if is_float(a.dtype) else float)
        m = a.max(axis=ctx.axis, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)
        total = xp.exp(a - m).sum(axis=ctx.axis, keepdims=True, dtype=acc_dtype(a))
        with np.errstate(divide="ignore"):  # a row of -inf sums to 0: log 0 = -inf, rightly
            y = xp.log(total) + m
        if is_float(a.dtype):  # (a float16 input, summed in float32, rounds back; integers: float)
            y = y.astype(a.dtype, copy=False)
        return y.reshape(ctx.out_shape)

    def backward(ctx, g):
        a, y = ctx.inputs[0], ctx.output
        if not ctx.keepdims:
            y = y.reshape(ctx.kshape)
        return _spread(ctx, g) * (a - y).exp()
