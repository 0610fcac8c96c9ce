"""Indexing ops: reading some entries of a tensor, and the scatter that is their backward.

Reading y = a[key] copies some entries of ``a`` (maybe several times, with repeated integer
indices). Its backward writes g back where the entries came from and *adds* where one entry
was read more than once: a scatter-add into zeros. The scatter-add's own backward is the
read again, so indexing stays differentiable to any order.
"""

from __future__ import annotations

from tensorlab.backend import in_float32, rounded, xp_of
from tensorlab.function import Function


def _is_basic(key) -> bool:
    """True when ``key`` uses only ints, slices, None, ``...`` and boolean masks, so each
    entry of ``a`` is read at most once and the scatter can be a plain assignment. Anything
    else (integer arrays, lists, nested tuples, ranges) may read an entry twice: add.at."""
    parts = key if isinstance(key, tuple) else (key,)
    for k in parts:
        if k is None or k is Ellipsis or isinstance(k, int | slice):  # (bool is an int)
            continue
        if hasattr(k, "dtype") and (k.dtype.kind == "b" or (k.ndim == 0 and k.dtype.kind in "iu")):
            continue
        return False
    return True


class GetItem(Function):
    """y = a[key] (slices, integers, integer arrays, boolean masks);
    da = zeros like a, with g added at the positions read (repeats accumulate)."""

    def forward(ctx, a, key):
        ctx.key = key
        return a[key]

    def backward(ctx, g):
        return ScatterAdd.apply(g, key=ctx.key, shape=ctx.inputs[0].shape)


def _added_at(a, key, shape):
    """zeros(shape) with ``a`` added at ``key`` (repeated positions add up). float16 and
    bfloat16 are summed in float32 and rounded once, as every sum here (CuPy's add.at has no
    bfloat16 at all)."""
    a, half = in_float32(a)
    out = xp_of(a).zeros(shape, dtype=a.dtype)
    xp_of(a).add.at(out, key, a)
    return rounded(out, half)


class ScatterAdd(Function):
    """y = zeros(shape) with y[key] += a (the backward of ``GetItem``);  da = g[key]."""

    def forward(ctx, a, key, shape):
        ctx.key = key
        if _is_basic(key):
            out = xp_of(a).zeros(shape, dtype=a.dtype)
            out[key] = a
            return out
        return _added_at(a, key, shape)

    def backward(ctx, g):
        return g[ctx.key]


def _along_axis_index(xp, index, axis: int) -> tuple:
    """The full index tuple that reads ``a[..., index[..., i, ...], ...]`` along ``axis`` at
    every position of ``index`` (a grid over ``index``'s shape, never broadcast to ``a``'s):
    on every other axis an ``arange`` shaped to broadcast along it alone (NumPy's
    ``indices(sparse=True)``, which CuPy's ``indices`` does not offer)."""
    nd = index.ndim
    grids = [
        xp.arange(n).reshape((1,) * i + (n,) + (1,) * (nd - i - 1))
        for i, n in enumerate(index.shape)
    ]
    grids[axis] = index
    return tuple(grids)


class Gather(Function):
    """y[..., i, ...] = a[..., index[..., i, ...], ...] along ``axis``;
    da = zeros like a, with g added at the gathered positions."""

    def forward(ctx, a, axis, index):
        ctx.axis, ctx.index = axis, index  # (Tensor.gather checks and counts the axis from 0)
        return a[_along_axis_index(xp_of(a), index, axis)]

    def backward(ctx, g):
        return ScatterAlongAxis.apply(g, axis=ctx.axis, index=ctx.index, shape=ctx.inputs[0].shape)


class ScatterAlongAxis(Function):
    """y = zeros(shape) with a added at ``index`` along ``axis`` (the backward of ``Gather``,
    and ``scatter_add``);  da = g read at the same positions, ``gather(g, axis, index)``.

    ``index`` may be smaller than ``shape`` on the other axes too (PyTorch's scatter rule):
    only the positions it names are read back, never a broadcast of it."""

    def forward(ctx, a, axis, index, shape):
        ctx.axis, ctx.index = axis, index
        return _added_at(a, _along_axis_index(xp_of(a), index, axis), shape)

    def backward(ctx, g):
        return GetItem.apply(g, key=_along_axis_index(xp_of(g.data), ctx.index, ctx.axis))


class Tril(Function):
    """y = a with entries above diagonal k (of the last two axes) set to 0;  da = tril(g, k)."""

    def forward(ctx, a, k):
        ctx.k = k
        return xp_of(a).tril(a, k).astype(a.dtype, copy=False)  # (CuPy: bfloat16 -> float32)

    def backward(ctx, g):
        return g.tril(ctx.k)


class Triu(Function):
    """y = a with entries below diagonal k (of the last two axes) set to 0;  da = triu(g, k)."""

    def forward(ctx, a, k):
        ctx.k = k
        return xp_of(a).triu(a, k).astype(a.dtype, copy=False)  # (CuPy: bfloat16 -> float32)

    def backward(ctx, g):
        return g.triu(ctx.k)
