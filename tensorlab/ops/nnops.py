"""Normalizing exponentials: softmax and log-softmax along one axis.

With y = softmax(a), ∂yᵢ/∂aⱼ = yᵢ(δᵢⱼ - yⱼ), so the vector-Jacobian product is
da = y ⊙ (g - Σⱼ gⱼ yⱼ): one multiply, one row sum, one subtract, one multiply — the Jacobian
matrix is never built.
"""

from __future__ import annotations

from tensorlab.backend import xp_of
from tensorlab.function import Function


class Softmax(Function):
    """y = exp(a - max a) / Σ exp(a - max a) along ``axis``;  da = y ⊙ (g - Σ(g ⊙ y))."""

    def forward(ctx, a, axis):
        ctx.axis = axis
        xp = xp_of(a)
        e = xp.exp(a - a.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return e

    def backward(ctx, g):
        y = ctx.output
        return y * (g - (g * y).sum(axis=ctx.axis, keepdims=True))


class LogSoftmax(Function):
    """y = a - logsumexp(a) along ``axis``;  da = g - softmax(a) ⊙ Σ g = g - exp(y) ⊙ Σ g."""

    def forward(ctx, a, axis):
        ctx.axis = axis
        xp = xp_of(a)
        shifted = a - a.max(axis=axis, keepdims=True)
        return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))

    def backward(ctx, g):
        return g - ctx.output.exp() * g.sum(axis=ctx.axis, keepdims=True)
