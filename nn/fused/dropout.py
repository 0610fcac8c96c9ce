"""Inverted dropout as one node."""

from __future__ import annotations

from nn.fused._util import const
from tensorlab.backend import device_of, generator
from tensorlab.function import Function


class DropoutFn(Function):
    """y = x ⊙ m / (1 - p), with m_i ~ Bernoulli(1 - p) drawn from the device's generator;
    dx = g ⊙ m / (1 - p).

    Dividing by the keep probability at training time ("inverted" dropout) keeps E[y] = x,
    so evaluation needs no rescaling: dropout is then the identity.
    """

    def forward(ctx, x, p):
        keep = generator(device_of(x)).random(x.shape, dtype=x.dtype) >= p
        ctx.scale = keep * x.dtype.type(1.0 / (1.0 - p))  # the mask, already scaled
        return x * ctx.scale

    def backward(ctx, g):
        return g * const(ctx.scale)
