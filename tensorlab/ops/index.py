"""Indexing ops: reading some entries of a tensor, and the scatter that is their backward.

Reading y = a[key] copies some entries of ``a`` (maybe several times, with repeated integer
indices). Its backward writes g back where the entries came from and *adds* where one entry
was read more than once: a scatter-add into zeros. The scatter-add's own backward is the
read again, so indexing stays differentiable to any order.
"""

from __future__ import annotations

import math

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
    bfloat16 at all). Rows picked by one integer array (an embedding's lookup): see
    :func:`scatter_add_rows`."""
    a, half = in_float32(a)
    xp = xp_of(a)
    rows = getattr(key, "dtype", None) is not None and key.dtype.kind in "iu" and key.ndim
    if rows and a.shape == key.shape + tuple(shape[1:]):
        return rounded(scatter_add_rows(key, a, shape[0]), half)
    out = xp.zeros(shape, dtype=a.dtype)
    xp.add.at(out, key, a)
    return rounded(out, half)


def scatter_add_rows(idx, g, num_rows: int):
    """out = zeros((num_rows, d)) with out[idx[n]] += g[n] for every n (repeats add up): the
    backward of reading rows (an embedding's W[idx]).

    Sorting the indices makes equal ones adjacent; ``add.reduceat`` then sums each run of
    equal indices in one pass and each distinct row is written once, far faster than
    ``add.at`` (``benchmarks/bench_block.py --embedding``), and on CuPy in a fixed order,
    where ``add.at``'s atomic adds would not be."""
    xp = xp_of(g)
    d = math.prod(g.shape[idx.ndim :])  # the numbers of one row
    flat, rows = xp.asarray(idx).reshape(-1), g.reshape(idx.size, d)  # (a host index too)
    out = xp.zeros((num_rows, d), dtype=g.dtype)
    if flat.size:
        flat = xp.where(flat < 0, flat + num_rows, flat)  # -1 and num_rows - 1: one row
        order = xp.argsort(flat, kind="stable")
        s = flat[order]
        starts = xp.flatnonzero(xp.concatenate((xp.ones(1, bool), s[1:] != s[:-1])))
        out[s[starts]] = xp.add.reduceat(rows[order], starts, axis=0)
    return out.reshape((num_rows,) + g.shape[idx.ndim :])


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


class Triangle(Function):
    """y = a with the entries above diagonal k of the last two axes set to 0 (``tril``), or
    those below it (``upper``: ``triu``);  da = the same triangle of g."""

    def forward(ctx, a, k, upper):
        if a.ndim < 2:  # (NumPy's tril would make a vector a square matrix)
            raise ValueError(
                f"{'triu' if upper else 'tril'}: needs a matrix or a batch of them (2 or more "
                f"axes), got shape {a.shape}"
            )
        ctx.k, ctx.upper = k, upper
        y = (xp_of(a).triu if upper else xp_of(a).tril)(a, k)
        return y.astype(a.dtype, copy=False)  # (CuPy: bfloat16 -> float32)

    def backward(ctx, g):
        return Triangle.apply(g, k=ctx.k, upper=ctx.upper)
