"""Rotary position embedding (RoPE) as one node: a rotation of each feature pair."""

from __future__ import annotations

from tensorlab.backend import xp_of
from tensorlab.function import Function


class Rotary(Function):
    """Rotate each pair (x_{2i}, x_{2i+1}) of the last axis by the angle θ_{t,i} of its
    position t (Su et al. 2021)::

        y_{2i}   = x_{2i} cos θ - x_{2i+1} sin θ
        y_{2i+1} = x_{2i} sin θ + x_{2i+1} cos θ

    ``cos`` and ``sin`` are arrays (T, d/2) broadcast over the leading axes of x (..., T, d).
    A rotation is orthogonal, so the backward is the rotation by -θ:
    dx = Rotary(g, cos, -sin), itself a Rotary node, hence differentiable to any order.
    """

    def forward(ctx, x, cos, sin):
        ctx.cos, ctx.sin = cos, sin
        pairs = x.reshape(x.shape[:-1] + (-1, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        y = xp_of(x).empty_like(pairs)
        y[..., 0] = a * cos - b * sin
        y[..., 1] = a * sin + b * cos
        return y.reshape(x.shape)

    def backward(ctx, g):
        return Rotary.apply(g, cos=ctx.cos, sin=-ctx.sin)
