"""Normalizing exponentials: softmax and log-softmax along one axis.

With y = softmax(a), ∂yᵢ/∂aⱼ = yᵢ(δᵢⱼ - yⱼ), so the vector-Jacobian product is
da = y ⊙ (g - Σⱼ gⱼ yⱼ): one multiply, one row sum, one subtract, one multiply — the Jacobian
matrix is never built.
"""

from __future__ import annotations

from tensorlab.backend import acc_dtype, xp_of
from tensorlab.function import Function


class Softmax(Function):
    """y = exp(a - max a) / Σ exp(a - max a) along ``axis``;  da = y ⊙ (g - Σ(g ⊙ y))."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis):
        ctx.axis = axis
        if a.size == 0:  # nothing to normalize (an empty axis): an empty result, as PyTorch
            return a.copy()
        xp = xp_of(a)
        e = xp.exp(a - a.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True, dtype=acc_dtype(a))
        return e

    def backward(ctx, g):
        y = ctx.output
        return y * (g - (g * y).sum(axis=ctx.axis, keepdims=True))


def log_softmax_array(a, axis: int = -1):
    """a - logsumexp(a) along ``axis`` on a raw array (shifted by the max: no overflow).

    The one array-level log-softmax: :class:`LogSoftmax` runs it, and code that works on plain
    arrays (sampling, beam search, circuit tables) calls it instead of writing its own."""
    if a.size == 0:  # an empty axis: an empty result, as PyTorch
        return a.copy()
    xp = xp_of(a)
    shifted = a - a.max(axis=axis, keepdims=True)
    lse = xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True, dtype=acc_dtype(a)))
    return shifted - lse.astype(a.dtype, copy=False)


class LogSoftmax(Function):
    """y = a - logsumexp(a) along ``axis``;  da = g - softmax(a) ⊙ Σ g = g - exp(y) ⊙ Σ g."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis):
        ctx.axis = axis
        return log_softmax_array(a, axis)

    def backward(ctx, g):
        return g - ctx.output.exp() * g.sum(axis=ctx.axis, keepdims=True)
