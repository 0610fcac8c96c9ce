"""erf, the Gauss error function, as an engine op.

Its forward is the ``xp.erf`` of the array namespaces (``tensorlab/fused.py``: exact in
float64, Abramowitz & Stegun 7.1.26 in float32 on NumPy, CUDA's ``erf`` on CuPy); its backward
is written in Tensor ops, so it is differentiable as it is, and the fused ops whose formulas
use ``xp.erf`` (GELU) get their second derivatives through it.
"""

from __future__ import annotations

import math

from tensorlab.function import Function
from tensorlab.fused import fused

TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@fused(widen=True)
def erf_kernel(xp, a):
    """erf(a), by the namespace's ``erf``."""
    return xp.erf(a)


class Erf(Function):
    """y = erf(a) = (2/√π) ∫₀ᵃ e^(-s²) ds;  da = g (2/√π) e^(-a²)."""

    def forward(ctx, a):
        return erf_kernel(a)

    def backward(ctx, g):
        a = ctx.inputs[0]
        return g * (-(a * a)).exp() * TWO_OVER_SQRT_PI


def erf(x):
    """erf of a Tensor (differentiable)."""
    return Erf.apply(x)
