"""Smooth activations with one-node forward and backward: erf, GELU (exact and tanh form),
SiLU and ELU. (ReLU, sigmoid and tanh are engine ops: ``x.relu()``, ``x.sigmoid()``, ...)

NumPy has no ``erf``, so :func:`erf` uses the rational approximation 7.1.26 of Abramowitz &
Stegun (1964): with t = 1/(1 + p|x|),

    erf(x) ≈ sign(x) (1 - (a₁t + a₂t² + a₃t³ + a₄t⁴ + a₅t⁵) e^(-x²)),   |error| ≤ 1.5e-7,

accurate to float32 precision (and to about 1e-7 in float64). The backward of erf and of the
exact GELU use the exact derivatives (2/√π) e^(-x²) and Φ(x) + x φ(x); the forward's 1.5e-7
error therefore shows up in a float64 gradcheck as a relative mismatch near 1e-7, far inside
its tolerance (rtol 1e-3).
"""

from __future__ import annotations

import math

import numpy as np

from nn.fused._util import const, recording, row_blocks
from tensorlab.backend import xp_of
from tensorlab.function import Function

_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_TANH_C = math.sqrt(2.0 / math.pi)  # the tanh form's √(2/π) and its cubic coefficient
_TANH_K = 0.044715
_LOG2_E = 1.0 / math.log(2.0)
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}  # same-width unsigned views, by itemsize


def _erf_and_gauss(z, out=None, gauss_out=None):
    """(erf(z), e^(-z²)) on a raw array; the second is the derivative's shape, reused. They are
    written into ``out`` and ``gauss_out`` when given (arrays of z's shape).

    Written for speed on NumPy, where each line is one pass over memory and some ufuncs are
    much slower than others: e^(-z²) is computed as 2^(-z² log₂e) (``exp2`` is about twice as
    fast as ``exp`` for float32), 1/(1 + p|z|) with ``divide`` (faster than ``reciprocal``),
    and the sign is restored by copying z's sign bit into the result, which is ≥ 0 before that
    (``copysign`` is not vectorised and costs as much as six multiplications).
    """
    xp = xp_of(z)
    if z.ndim == 0:  # NumPy arithmetic on 0-d arrays returns scalars, which take no out=
        e, g = _erf_and_gauss(z.reshape(1))
        return e.reshape(()), g.reshape(())
    a = xp.abs(z, out=gauss_out)  # |z|, turned into e^(-z²) in place below
    t = a * _P
    t += 1.0
    xp.divide(1.0, t, out=t)
    poly = xp.multiply(t, _A[4], out=out)
    for c in _A[3::-1]:  # Horner: ((a₅t + a₄)t + a₃)t ...
        poly += c
        poly *= t
    gauss = xp.multiply(a, a, out=a)
    gauss *= -_LOG2_E
    xp.exp2(gauss, out=gauss)
    poly *= gauss
    xp.subtract(1.0, poly, out=poly)  # erf(|z|) ≥ 0
    bits = _UINT[poly.dtype.itemsize]
    sign = xp.bitwise_and(z.view(bits), bits(1 << (8 * poly.dtype.itemsize - 1)))
    xp.bitwise_or(poly.view(bits), sign, out=poly.view(bits))  # copysign(erf(|z|), z)
    return poly, gauss


def erf(z):
    """erf of a raw array (Abramowitz & Stegun 7.1.26, |error| ≤ 1.5e-7)."""
    return _erf_and_gauss(z)[0]


class Erf(Function):
    """y = erf(a) = (2/√π) ∫₀ᵃ e^(-s²) ds;  da = g (2/√π) e^(-a²)."""

    def forward(ctx, a):
        y, ctx.gauss = _erf_and_gauss(a)
        return y

    def backward(ctx, g):
        if recording():
            a = ctx.inputs[0]
            return g * (-(a * a)).exp() * _TWO_OVER_SQRT_PI
        return g.data * (ctx.gauss * _TWO_OVER_SQRT_PI)


class GELUFn(Function):
    """y = x Φ(x), Φ(x) = ½(1 + erf(x/√2)) the standard normal CDF (Hendrycks & Gimpel 2016);
    dx = g (Φ(x) + x φ(x)),  φ(x) = e^(-x²/2)/√(2π) the normal density."""

    def forward(ctx, x):
        xp = xp_of(x)
        y, cdf, pdf = (xp.empty(x.shape, x.dtype) for _ in range(3))
        rows = x.reshape(-1, x.shape[-1]) if x.ndim > 1 and x.size else x.reshape(-1)
        views = [a.reshape(rows.shape) for a in (y, cdf, pdf)]  # blocks of whole rows
        for s in row_blocks(rows):  # one block at a time, to stay in cache (see _util)
            xs, ys, e, gauss = rows[s], views[0][s], views[1][s], views[2][s]
            _erf_and_gauss(xs * _SQRT_HALF, out=e, gauss_out=gauss)
            e += 1.0
            e *= 0.5  # Φ(x)
            gauss *= _INV_SQRT_2PI  # φ(x)
            xp.multiply(xs, e, out=ys)
        ctx.cdf, ctx.pdf = cdf, pdf
        return y

    def backward(ctx, g):
        x = ctx.inputs[0]
        if recording():
            cdf = 0.5 * (Erf.apply(x * _SQRT_HALF) + 1.0)
            pdf = (x * x * -0.5).exp() * _INV_SQRT_2PI
            return g * (cdf + x * pdf)
        d = x.data * ctx.pdf
        d += ctx.cdf
        d *= g.data
        return d


class GELUTanhFn(Function):
    """The tanh form of GELU (GPT-2's): y = ½ x (1 + t),  t = tanh(u),  u = c (x + k x³)
    with c = √(2/π), k = 0.044715;
    dx = g (½(1 + t) + ½ x (1 - t²) c (1 + 3k x²))."""

    def forward(ctx, x):
        xp = xp_of(x)
        x2 = x * x
        u = x2 * _TANH_K
        u += 1.0
        u *= x
        u *= _TANH_C
        t = xp.tanh(u, out=u)
        ctx.t, ctx.x2 = t, x2
        y = t + 1.0
        y *= x
        y *= 0.5
        return y

    def backward(ctx, g):
        x = ctx.inputs[0]
        if recording():
            t = ((x + x * x * x * _TANH_K) * _TANH_C).tanh()
            du = (x * x * (3 * _TANH_K) + 1.0) * _TANH_C
            return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
        t, x2 = ctx.t, ctx.x2
        du = x2 * (3 * _TANH_K * _TANH_C)  # c (1 + 3k x²), built in place
        du += _TANH_C
        du *= x.data
        du *= 1.0 - t * t
        du += t
        du += 1.0
        du *= 0.5
        du *= g.data
        return du


class SiLUFn(Function):
    """y = x σ(x) (SiLU, a.k.a. Swish with β = 1);  dx = g σ(x) (1 + x (1 - σ(x)))."""

    def forward(ctx, x):
        xp = xp_of(x)
        s = xp.tanh(x * 0.5)  # σ(x) = (1 + tanh(x/2))/2 never overflows
        s += 1.0
        s *= 0.5
        ctx.sig = s
        return x * s

    def backward(ctx, g):
        x = ctx.inputs[0]
        if recording():
            s = x.sigmoid()
            return g * (s * (1.0 + x * (1.0 - s)))
        s = ctx.sig
        d = 1.0 - s
        d *= x.data
        d += 1.0
        d *= s
        d *= g.data
        return d


class ELUFn(Function):
    """y = x for x > 0, α(eˣ - 1) otherwise (Clevert et al. 2015);
    dx = g for x > 0, g (y + α) = g α eˣ otherwise."""

    def forward(ctx, x, alpha):
        xp = xp_of(x)
        ctx.alpha = alpha
        ctx.pos = x > 0
        neg = xp.expm1(xp.minimum(x, 0.0))
        neg *= alpha
        return xp.where(ctx.pos, x, neg)

    def backward(ctx, g):
        x, pos = ctx.inputs[0], ctx.pos
        if recording():
            slope = (x.minimum(0.0)).exp() * ctx.alpha
            return g * (const(pos.astype(x.dtype)) + slope * const((~pos).astype(x.dtype)))
        y = ctx.output.data
        xp = xp_of(y)
        return g.data * xp.where(pos, 1.0, y + ctx.alpha).astype(y.dtype, copy=False)
