"""Shape ops: they move entries around without changing them.

Each backward moves ``g`` back the opposite way: reshape undoes reshape, the inverse
permutation undoes a permutation, and summing undoes broadcasting (an entry copied to k places
receives the sum of the k gradients). ``BroadcastTo`` and ``SumTo`` are each other's backward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tensorlab.backend import acc_dtype, xp_of
from tensorlab.function import Function
from tensorlab.fused import array_math
from tensorlab.tensor import Tensor, axis_index


class Reshape(Function):
    """y = a viewed with a new shape (same entries, same order);  da = g reshaped back."""

    def forward(ctx, a, shape):
        return a.reshape(shape)

    def backward(ctx, g):
        return g.reshape(ctx.inputs[0].shape)


class Permute(Function):
    """y = a with its axes reordered, y.shape[i] = a.shape[axes[i]];
    da = g permuted by the inverse order."""

    def forward(ctx, a, axes):
        ctx.axes = axes
        return a.transpose(axes)

    def backward(ctx, g):
        inverse = [0] * len(ctx.axes)
        for i, ax in enumerate(ctx.axes):
            inverse[ax % len(ctx.axes)] = i
        return Permute.apply(g, axes=tuple(inverse))


class BroadcastTo(Function):
    """y = a copied along new or size-1 axes to ``shape``;  da = g summed over those axes."""

    def forward(ctx, a, shape):
        return xp_of(a).broadcast_to(a, shape)

    def backward(ctx, g):
        return g.sum_to(ctx.inputs[0].shape)


class SumTo(Function):
    """y = a summed over the axes that broadcasting to a.shape would have added or stretched;
    da = g broadcast back to a.shape.

    This is the one place where gradients of broadcasting ops are reduced to their input's
    shape: the engine calls it whenever a backward returns a gradient of another shape.
    """

    def forward(ctx, a, shape):
        lead = a.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, n in enumerate(shape) if n == 1 and a.shape[lead + i] != 1
        )
        if not axes:
            return a.reshape(shape)
        if len(axes) == lead:  # only leading axes: the rows' sum 1ᵀa (a gemv, 3x faster)
            rows = a.reshape(math.prod(a.shape[:lead]), math.prod(shape))
            total = array_math(a).sum(rows, axis=0)  # (not reshaped to its own shape: a view,
            return total if total.shape == shape else total.reshape(shape)  # copied as a .grad)
        acc = acc_dtype(a)
        out = a.sum(axis=axes, keepdims=True, dtype=acc)
        return (out if acc is None else out.astype(a.dtype)).reshape(shape)

    def backward(ctx, g):
        return g.expand(ctx.inputs[0].shape)


class Roll(Function):
    """y = a shifted cyclically by ``shifts`` along ``axis`` (entries pushed off one end come
    back at the other);  da = g shifted back, by -shifts."""

    def forward(ctx, a, shifts, axis):
        ctx.shifts, ctx.axis = shifts, axis
        return xp_of(a).roll(a, shifts, axis)

    def backward(ctx, g):
        back = tuple(-s for s in ctx.shifts) if isinstance(ctx.shifts, tuple) else -ctx.shifts
        return Roll.apply(g, shifts=back, axis=ctx.axis)


class Concatenate(Function):
    """y = [a₁, a₂, ...] joined along ``axis``;  daᵢ = the slice of g that aᵢ filled."""

    def forward(ctx, *arrays, axis):
        ctx.axis = axis_index("concatenate", axis, arrays[0].ndim)
        return xp_of(arrays[0]).concatenate(arrays, axis=ctx.axis)

    def backward(ctx, g):
        lead = (slice(None),) * ctx.axis
        grads, start = [], 0
        for t in ctx.inputs:
            n = t.shape[ctx.axis]
            grads.append(g[lead + (slice(start, start + n),)] if t.requires_grad else None)
            start += n
        return tuple(grads)


class Stack(Function):
    """y = [a₁, a₂, ...] stacked along a new ``axis``;  daᵢ = g[..., i, ...] along that axis."""

    def forward(ctx, *arrays, axis):
        ctx.axis = axis_index("stack", axis, arrays[0].ndim + 1)
        return xp_of(arrays[0]).stack(arrays, axis=ctx.axis)

    def backward(ctx, g):
        lead = (slice(None),) * ctx.axis
        return tuple(g[lead + (i,)] if t.requires_grad else None for i, t in enumerate(ctx.inputs))


def _tensors(op: str, tensors) -> list[Tensor]:
    """``tensors`` as a list, refused with a one-line error when it is empty or holds
    something other than a Tensor (as PyTorch: no implicit conversion of numbers)."""
    if isinstance(tensors, Tensor):
        raise TypeError(f"{op}: takes a list of tensors, got one tensor of shape {tensors.shape}")
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{op}: needs at least one tensor, got an empty list")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"{op}: element {i} is {t!r:.40} of type {type(t).__name__}, not a Tensor; "
                "every element must be a Tensor (wrap numbers with tl.tensor)"
            )
    return tensors


def concatenate(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis (``tl.cat``)."""
    return Concatenate.apply(*_tensors("concatenate", tensors), axis=axis)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors of equal shape along a new axis."""
    return Stack.apply(*_tensors("stack", tensors), axis=axis)
