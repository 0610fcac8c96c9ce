"""Normalizing exponentials: softmax and log-softmax along one axis.

With y = softmax(a), ∂yᵢ/∂aⱼ = yᵢ(δᵢⱼ - yⱼ), so the vector-Jacobian product is
da = y ⊙ (g - Σⱼ gⱼ yⱼ): one multiply, one row sum, one subtract, one multiply — the Jacobian
matrix is never built. float16 and bfloat16 inputs are exponentiated and summed in float32 and
the result rounded back.
"""

from __future__ import annotations

from tensorlab.backend import in_float32, rounded, xp_of
from tensorlab.function import Function


class Softmax(Function):
    """y = exp(a - max a) / Σ exp(a - max a) along ``axis``;  da = y ⊙ (g - Σ(g ⊙ y))."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, a, axis):
        ctx.axis = axis if a.ndim else None  # a 0-d input: its one entry is the axis
        if a.size == 0:  # nothing to normalize (an empty axis): an empty result, as PyTorch
            return a.copy()
        x, half = in_float32(a)
        e = xp_of(x).exp(x - x.max(axis=axis, keepdims=True))  # (a 0-d x gives NumPy scalars)
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
        ctx.axis = axis if a.ndim else None  # a 0-d input: its one entry is the axis
        return log_softmax_array(a, axis)

    def backward(ctx, g):
        return g - ctx.output.exp() * g.sum(axis=ctx.axis, keepdims=True)
