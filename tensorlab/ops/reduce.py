"""Reductions over one or more axes: sum, mean, max, min, var, logsumexp.

A reduction maps many entries to one, so its backward sends ``g`` back to every entry that
was reduced: ``g`` is reshaped to the kept-dims shape (a 1 where each reduced axis was) and
broadcast over the input. What differs between reductions is the weight each entry gets.
"""

from __future__ import annotations

from tensorlab.backend import xp_of
from tensorlab.function import Function
from tensorlab.tensor import Tensor

_const = Tensor._wrap


def _reduce_setup(ctx, a, axis, keepdims) -> None:
    """Store what every backward needs: the axes reduced and the kept-dims shape."""
    nd = a.ndim
    if axis is None:
        axes = tuple(range(nd))
    elif isinstance(axis, int):
        axes = (axis % nd if nd else axis,)
    else:
        axes = tuple(ax % nd for ax in axis)
    ctx.axis = axes if axis is not None else None
    ctx.keepdims = keepdims
    ctx.kshape = tuple(1 if i in axes else n for i, n in enumerate(a.shape))
    ctx.out_shape = tuple(n for i, n in enumerate(a.shape) if i not in axes)
    ctx.count = 1
    for i in axes:
        ctx.count *= a.shape[i] if nd else 1


def _spread(ctx, g: Tensor) -> Tensor:
    """``g`` reshaped to keep-dims and broadcast over the input's shape."""
    if not ctx.keepdims:
        g = g.reshape(ctx.kshape)
    return g.expand(ctx.inputs[0].shape)


class Sum(Function):
    """y = Σ_axis a;  da = g broadcast over the reduced axes."""

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        return a.sum(axis=ctx.axis, keepdims=keepdims)

    def backward(ctx, g):
        return _spread(ctx, g)


class Mean(Function):
    """y = (1/N) Σ_axis a;  da = g / N broadcast over the reduced axes."""

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        return a.mean(axis=ctx.axis, keepdims=keepdims)

    def backward(ctx, g):
        return _spread(ctx, g / ctx.count)


class _Extremum(Function):
    """Shared backward of max and min: the gradient goes to the entries that attain the
    extreme value, split evenly among ties:  da = g * [a = y] / #ties."""

    saves_output = True  # backward reads ctx.output

    def backward(ctx, g):
        a = ctx.inputs[0].data
        y = ctx.output.data
        hit = a == (y if ctx.keepdims else y.reshape(ctx.kshape))
        weights = hit / hit.sum(axis=ctx.axis, keepdims=True)
        return _spread(ctx, g) * _const(weights.astype(a.dtype))


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


class Var(Function):
    """y = Σ_axis (a - ā)² / (N - ddof);  da = g * 2 (a - ā) / (N - ddof).

    (The term from ā's own dependence on a vanishes because Σ (a - ā) = 0.)
    """

    def forward(ctx, a, axis, keepdims, ddof):
        _reduce_setup(ctx, a, axis, keepdims)
        ctx.ddof = ddof
        return a.var(axis=ctx.axis, keepdims=keepdims, ddof=ddof)

    def backward(ctx, g):
        a = ctx.inputs[0]
        centered = a - a.mean(axis=ctx.axis, keepdims=True)
        return _spread(ctx, g) * centered * (2.0 / (ctx.count - ctx.ddof))


class LogSumExp(Function):
    """y = log Σ_axis exp(a), computed as m + log Σ exp(a - m) with m = max a (no overflow);
    da = g * exp(a - y) = g * softmax(a)."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis, keepdims):
        _reduce_setup(ctx, a, axis, keepdims)
        xp = xp_of(a)
        m = a.max(axis=ctx.axis, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)
        y = xp.log(xp.exp(a - m).sum(axis=ctx.axis, keepdims=True)) + m
        return y if keepdims else y.reshape(ctx.out_shape)

    def backward(ctx, g):
        a, y = ctx.inputs[0], ctx.output
        if not ctx.keepdims:
            y = y.reshape(ctx.kshape)
        return _spread(ctx, g) * (a - y).exp()
