"""Normalizing exponentials: softmax and log-softmax along one axis.

With y = softmax(a), ∂yᵢ/∂aⱼ = yᵢ(δᵢⱼ - yⱼ), so the vector-Jacobian product is
da = y ⊙ (g - Σⱼ gⱼ yⱼ): one multiply, one row sum, one subtract, one multiply — the Jacobian
matrix is never built. float16 and bfloat16 inputs are exponentiated and summed in float32 and
the result rounded back.
"""

from __future__ import annotations

import numpy as np

from tensorlab.backend import in_float32, rounded, xp_of
from tensorlab.function import Function
from tensorlab.fused import fused


def shifted_exp(x, m, out=None):
    """exp(x - m) on a raw array, m broadcast against x (a row's maximum: no overflow): the
    numerators of a softmax. On the CPU two passes, written into ``out`` when given (``x``
    itself for an array the caller owns); on a GPU one kernel (:func:`shifted_exp_kernel`)."""
    xp = xp_of(x)
    if xp is not np:
        return shifted_exp_kernel(x, m)
    e = xp.subtract(x, m, out=out)
    return xp.exp(e, out=e)


@fused
def shifted_exp_kernel(xp, x, m):
    """exp(x - m) as one GPU kernel."""
    return xp.exp(x - m)


class Softmax(Function):
    """y = exp(a - max a) / Σ exp(a - max a) along ``axis``;  da = y ⊙ (g - Σ(g ⊙ y))."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis):
        ctx.axis = axis
        if a.size == 0:  # nothing to normalize (an empty axis): an empty result, as PyTorch
            return a.copy()
        x, half = in_float32(a)
        e = shifted_exp(x, x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return rounded(e, half)

    def backward(ctx, g):
        y = ctx.output
        return y * (g - (g * y).sum(axis=ctx.axis, keepdims=True))


def log_softmax_array(a, axis: int = -1):
    """a - logsumexp(a) along ``axis`` on a raw array (shifted by the max: no overflow).

    The one array-level log-softmax: :class:`LogSoftmax` runs it, and code that works on plain
    arrays (sampling, beam search, circuit tables) calls it instead of writing its own."""
    if a.size == 0:  # an empty axis: an empty result, as PyTorch
        return a.copy()
    xp, (x, half) = xp_of(a), in_float32(a)
    shifted = x - x.max(axis=axis, keepdims=True)
    y = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    return rounded(y, half)


class LogSoftmax(Function):
    """y = a - logsumexp(a) along ``axis``;  da = g - softmax(a) ⊙ Σ g = g - exp(y) ⊙ Σ g."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis):
        ctx.axis = axis
        return log_softmax_array(a, axis)

    def backward(ctx, g):
        return g - ctx.output.exp() * g.sum(axis=ctx.axis, keepdims=True)
