"""Activations and the transformer's feed-forward block.

The smooth activations erf, GELU (exact and tanh form), SiLU and ELU are each one node with a
closed-form backward (ReLU, sigmoid and tanh are engine ops: ``x.relu()``, ``x.sigmoid()``);
their functions and modules follow, then :class:`FeedForward`, the MLP that uses them.

NumPy has no ``erf``. For float32 (and float16), :func:`erf` uses the rational approximation
7.1.26 of Abramowitz & Stegun (1964): with t = 1/(1 + p|x|),

    erf(x) ≈ sign(x) (1 - (a₁t + a₂t² + a₃t³ + a₄t⁴ + a₅t⁵) e^(-x²)),   |error| ≤ 1.5e-7,

accurate to float32 precision and fast (a dozen array passes). float64 is the dtype of
gradient checks and of comparisons with PyTorch, where 1.5e-7 would be the largest error in
sight; there erf is Python's ``math.erf`` applied to every entry (within an ulp or two of the
true value; one Python call per entry, so float64 trades speed for exactness), and
``cupyx.scipy.special.erf`` on a GPU. The backward of erf and of the exact GELU use the exact
derivatives (2/√π) e^(-x²) and Φ(x) + x φ(x).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

import tensorlab as tl
from nn.dropout import dropout
from nn.init import constant, uniform
from nn.linear import linear
from nn.module import HookPoint, Module
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE, erf_exact, in_float32, rounded, xp_of
from tensorlab.function import Function
from tensorlab.fused import fused
from tensorlab.ops.elementwise import sigmoid_of

_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_TANH_C = math.sqrt(2.0 / math.pi)  # the tanh form's √(2/π) and its cubic coefficient
_TANH_K = 0.044715
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}  # same-width unsigned views, by itemsize


def _erf_and_gauss(z, out=None, gauss_out=None):
    """(erf(z), e^(-z²)) on a raw array; the second is the derivative's shape, reused. They are
    written into ``out`` and ``gauss_out`` when given (arrays of z's shape).

    Written for speed on NumPy, where each line is one pass over memory and some ufuncs are
    much slower than others (``benchmarks/bench_kernels.py`` times them): e^(-z²) with ``exp``,
    which NumPy vectorises for float32 on AVX2 CPUs, where ``exp2`` runs entry by entry;
    1/(1 + p|z|) with ``divide`` (faster than ``reciprocal``); and the sign restored by
    copying z's sign bit into the result, which is ≥ 0 before that (``copysign`` is not
    vectorised).
    """
    xp = xp_of(z)
    if z.ndim == 0:  # NumPy arithmetic on 0-d arrays returns scalars, which take no out=
        e, g = _erf_and_gauss(z.reshape(1))
        return e.reshape(()), g.reshape(())
    if z.dtype == np.float64:
        return _erf_and_gauss_float64(xp, z, out, gauss_out)
    a = xp.abs(z, out=gauss_out)  # |z|, turned into e^(-z²) in place below
    t = a * _P
    t += 1.0
    xp.divide(1.0, t, out=t)
    poly = xp.multiply(t, _A[4], out=out)
    for c in _A[3::-1]:  # Horner: ((a₅t + a₄)t + a₃)t ...
        poly += c
        poly *= t
    gauss = xp.multiply(a, a, out=a)
    xp.negative(gauss, out=gauss)
    xp.exp(gauss, out=gauss)
    poly *= gauss
    xp.subtract(1.0, poly, out=poly)  # erf(|z|) ≥ 0
    bits = _UINT[poly.dtype.itemsize]
    sign = xp.bitwise_and(z.view(bits), bits(1 << (8 * poly.dtype.itemsize - 1)))
    xp.bitwise_or(poly.view(bits), sign, out=poly.view(bits))  # copysign(erf(|z|), z)
    return poly, gauss


def _erf_and_gauss_float64(xp, z, out=None, gauss_out=None):
    """(erf(z), e^(-z²)) for float64, exact to an ulp or two (:func:`erf_exact`)."""
    e = erf_exact(z)
    if out is not None:
        out[...] = e
        e = out
    gauss = xp.multiply(z, z, out=gauss_out)
    xp.negative(gauss, out=gauss)
    xp.exp(gauss, out=gauss)
    return e, gauss


# Long chains of elementwise passes (exact GELU makes about 20) over an array larger than the
# CPU's caches run at memory speed: every pass streams the whole array in and out again. Done
# one block of rows at a time, the block and its temporaries stay in cache between passes. This
# pays most where the array is many times the cache: on the 6-layer, 384-wide benchmark GELU's
# input is 1.6M numbers (6 MiB). Arrays of at most one block are done in one piece.
BLOCK = 1 << 18  # numbers per block: 1 MiB of float32, so a few temporaries fit in cache


def row_blocks(a) -> list[slice]:
    """Slices of ``a``'s first axis that cut it into blocks of about :data:`BLOCK` numbers (one
    slice for an array of at most a block). For an (N, d) array each block is whole rows."""
    if a.ndim == 0 or a.size <= BLOCK:
        return [slice(None)]
    step = max(1, BLOCK // (a.size // a.shape[0]))
    return [slice(i, i + step) for i in range(0, a.shape[0], step)]


def erf(z):
    """erf of a raw array: exact to an ulp or two in float64, Abramowitz & Stegun 7.1.26
    (|error| ≤ 1.5e-7) in float32 (which float16 and bfloat16 are computed in)."""
    z, half = in_float32(z)
    return rounded(_erf_and_gauss(z)[0], half)


class ErfFn(Function):
    """y = erf(a) = (2/√π) ∫₀ᵃ e^(-s²) ds;  da = g (2/√π) e^(-a²).

    The backward is written in Tensor ops (it is short), so it is differentiable as it is."""

    def forward(ctx, a):
        a, half = in_float32(a)
        return rounded(_erf_and_gauss(a)[0], half)

    def backward(ctx, g):
        a = ctx.inputs[0]
        return g * (-(a * a)).exp() * _TWO_OVER_SQRT_PI


class GELUFn(Function):
    """y = x Φ(x), Φ(x) = ½(1 + erf(x/√2)) the standard normal CDF (Hendrycks & Gimpel 2016);
    dx = g (Φ(x) + x φ(x)),  φ(x) = e^(-x²/2)/√(2π) the normal density."""

    def forward(ctx, x):
        xp, (x, half) = xp_of(x), in_float32(x)
        if xp is not np:  # a GPU: one fused kernel; the backward recomputes Φ and φ from x
            return rounded(gelu_kernel(x), half)
        y, cdf, slope = (xp.empty(x.shape, x.dtype) for _ in range(3))
        rows = x.reshape(-1, x.shape[-1]) if x.ndim > 1 and x.size else x.reshape(-1)
        views = [a.reshape(rows.shape) for a in (y, cdf, slope)]  # blocks of whole rows
        for s in row_blocks(rows):  # one block at a time, to stay in cache (see row_blocks)
            xs, ys, e, d = rows[s], views[0][s], views[1][s], views[2][s]
            _erf_and_gauss(xs * _SQRT_HALF, out=e, gauss_out=d)
            e += 1.0
            e *= 0.5  # Φ(x)
            d *= _INV_SQRT_2PI  # φ(x)
            xp.multiply(xs, e, out=ys)
            d *= xs
            d += e  # Φ(x) + x φ(x), the slope the backward multiplies g by
        ctx.slope = slope  # (Φ(x) itself is not kept)
        return rounded(y, half)

    def backward(ctx, g):
        x = ctx.inputs[0].data
        if xp_of(x) is not np:
            return gelu_grad_kernel(in_float32(x)[0], in_float32(g.data)[0])
        return g.data * ctx.slope

    @staticmethod
    def composed(x):
        return x * (ErfFn.apply(x * _SQRT_HALF) + 1.0) * 0.5


@fused
def gelu_kernel(xp, x):
    """GELUFn's forward as one GPU kernel: x Φ(x)."""
    return x * (0.5 + 0.5 * xp.erf(x * _SQRT_HALF))


@fused
def gelu_grad_kernel(xp, x, g):
    """GELUFn's backward as one GPU kernel: g (Φ(x) + x φ(x))."""
    cdf = 0.5 + 0.5 * xp.erf(x * _SQRT_HALF)
    pdf = xp.exp(-0.5 * x * x) * _INV_SQRT_2PI
    return g * (cdf + x * pdf)


class GELUTanhFn(Function):
    """The tanh form of GELU (GPT-2's): y = ½ x (1 + t),  t = tanh(u),  u = c (x + k x³)
    with c = √(2/π), k = 0.044715;
    dx = g (½(1 + t) + ½ x (1 - t²) c (1 + 3k x²))."""

    def forward(ctx, x):
        xp, (x, half) = xp_of(x), in_float32(x)
        if xp is not np:  # a GPU: one fused kernel; the backward recomputes t from x
            return rounded(gelu_tanh_kernel(x), half)
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
        return rounded(y, half)

    def backward(ctx, g):
        x = ctx.inputs[0].data
        if xp_of(x) is not np:
            return gelu_tanh_grad_kernel(in_float32(x)[0], in_float32(g.data)[0])
        t, x2 = ctx.t, ctx.x2
        du = x2 * (3 * _TANH_K * _TANH_C)  # c (1 + 3k x²), built in place
        du += _TANH_C
        du *= x
        du *= 1.0 - t * t
        du += t
        du += 1.0
        du *= 0.5
        du *= g.data
        return du

    @staticmethod
    def composed(x):
        return x * (((x + x * x * x * _TANH_K) * _TANH_C).tanh() + 1.0) * 0.5


@fused
def gelu_tanh_kernel(xp, x):
    """GELUTanhFn's forward as one GPU kernel: ½ x (1 + t)."""
    t = xp.tanh(_TANH_C * (x + _TANH_K * x * x * x))
    return 0.5 * x * (1.0 + t)


@fused
def gelu_tanh_grad_kernel(xp, x, g):
    """GELUTanhFn's backward as one GPU kernel: g (½(1 + t) + ½ x (1 - t²) c (1 + 3k x²))."""
    t = xp.tanh(_TANH_C * (x + _TANH_K * x * x * x))
    du = _TANH_C * (1.0 + 3 * _TANH_K * x * x)
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


class SiLUFn(Function):
    """y = x sigmoid(x) (SiLU, a.k.a. Swish with β = 1);
    dx = g sigmoid(x) (1 + x (1 - sigmoid(x)))."""

    def forward(ctx, x):
        xp, (x, half) = xp_of(x), in_float32(x)
        if xp is not np:  # a GPU: one fused kernel; the backward recomputes sigmoid(x)
            return rounded(silu_kernel(x), half)
        s = ctx.sig = sigmoid_of(x)
        return rounded(x * s, half)

    def backward(ctx, g):
        x = ctx.inputs[0].data
        if xp_of(x) is not np:
            return silu_grad_kernel(in_float32(x)[0], in_float32(g.data)[0])
        s = ctx.sig
        d = 1.0 - s
        d *= x
        d += 1.0
        d *= s
        d *= g.data
        return d

    @staticmethod
    def composed(x):
        return x * x.sigmoid()


@fused
def silu_kernel(xp, x):
    """SiLUFn's forward as one GPU kernel: x sigmoid(x) = x / (1 + e^(-x)) (:func:`sigmoid_of`;
    e^(-x) = ∞ past x ≈ -88 gives -0, the limit)."""
    return x / (1.0 + xp.exp(-x))


@fused
def silu_grad_kernel(xp, x, g):
    """SiLUFn's backward as one GPU kernel: g s (1 + x (1 - s)), s = sigmoid(x)."""
    s = 1.0 / (1.0 + xp.exp(-x))
    return g * s * (1.0 + x * (1.0 - s))


class ELUFn(Function):
    """y = x for x > 0, α(eˣ - 1) otherwise (Clevert et al. 2015);
    dx = g for x > 0, g (y + α) = g α eˣ otherwise."""

    saves_output = True  # backward reads ctx.output

    def forward(ctx, x, alpha):
        xp, (x, half) = xp_of(x), in_float32(x)
        ctx.pos = x > 0
        neg = xp.expm1(xp.minimum(x, 0.0))
        neg *= alpha
        return rounded(xp.where(ctx.pos, x, neg), half)

    def backward(ctx, g):
        y = ctx.output.data
        slope = xp_of(y).where(ctx.pos, 1.0, y + ctx.params["alpha"])
        return g.data * slope.astype(y.dtype, copy=False)

    @staticmethod
    def composed(x, alpha):
        return tl.where(x.data > 0, x, (x.minimum(0.0).exp() - 1.0) * alpha)


# ---------------------------------------------------------------------- functions
def relu(x: Tensor) -> Tensor:
    """max(x, 0)."""
    return x.relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x Φ(x) with Φ the standard normal CDF (``approximate="none"``), or GPT-2's tanh form
    ½ x (1 + tanh(√(2/π)(x + 0.044715 x³))) (``approximate="tanh"``)."""
    if approximate == "none":
        return GELUFn.apply(x)
    if approximate == "tanh":
        return GELUTanhFn.apply(x)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(x: Tensor) -> Tensor:
    """x sigmoid(x) (SiLU, also called Swish)."""
    return SiLUFn.apply(x)


swish = silu


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (eˣ - 1) otherwise."""
    return ELUFn.apply(x, alpha=alpha)


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + e^(-x))."""
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """exp(x) / Σ exp(x) along ``axis``."""
    return x.softmax(axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``."""
    return x.log_softmax(axis)


_BY_NAME: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": relu,
    "gelu": gelu,
    "gelu_tanh": lambda x: gelu(x, "tanh"),
    "silu": silu,
    "swish": silu,
    "elu": elu,
    "sigmoid": sigmoid,
    "tanh": tanh,
    "identity": lambda x: x,
}


def activation_fn(name: str) -> Callable[[Tensor], Tensor]:
    """The function called ``name``: relu, gelu (exact), gelu_tanh, silu/swish, elu,
    sigmoid, tanh, identity."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose from {sorted(_BY_NAME)}") from None


# ---------------------------------------------------------------------- modules
class ReLU(Module):
    """max(x, 0)."""

    def forward(self, x: Tensor) -> Tensor:
        return relu(x)


class GELU(Module):
    """x Φ(x) (``approximate="none"``) or its tanh approximation (``"tanh"``, GPT-2's)."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """x sigmoid(x), also called Swish."""

    def forward(self, x: Tensor) -> Tensor:
        return silu(x)


Swish = SiLU


class ELU(Module):
    """x for x > 0, alpha (eˣ - 1) otherwise."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Sigmoid(Module):
    """1 / (1 + e^(-x))."""

    def forward(self, x: Tensor) -> Tensor:
        return sigmoid(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)


# ---------------------------------------------------------------------- feed-forward
# Gated variants (Shazeer 2020, "GLU Variants Improve Transformer"): name -> gate activation.
GATED = {"glu": "sigmoid", "reglu": "relu", "geglu": "gelu", "swiglu": "silu"}


class FeedForward(Module):
    """The MLP of a transformer block, applied to each position on its own.

    Plain (``gated=False``)::

        FFN(x) = f(x W_in + b_in) W_out + b_out

    Gated (Shazeer 2020): the hidden layer is an activated "gate" times a linear "value"::

        FFN(x) = (f(x W_gate + b_gate) ⊙ (x W_in + b_in)) W_out + b_out

    with f = sigmoid (GLU), ReLU (ReGLU), GELU (GeGLU) or SiLU (SwiGLU). ``activation`` names f
    (relu, gelu, gelu_tanh, silu, ...); the names glu, reglu, geglu, swiglu choose the gated
    variant directly (``activation="swiglu"`` is ``activation="silu", gated=True``).

    Parameters (names as in the circuits literature): ``W_in`` (d_model, d_ff), ``W_gate``
    (d_model, d_ff, gated only), ``W_out`` (d_ff, d_model), biases ``b_in``, ``b_gate``
    (d_ff,) and ``b_out`` (d_model,) unless ``bias=False``. ``d_ff`` defaults to 4·d_model,
    and for gated variants to 8/3·d_model rounded up to a multiple of 8 (same parameter count
    as the plain 4× MLP: three matrices instead of two). ``dropout`` acts on the output (as in
    nanoGPT), before the residual add.

    Hook points (TransformerLens's names, each (B, T, d_ff)): ``hook_pre``, the neurons'
    pre-activations (the gate's, when gated), ``hook_pre_linear`` (gated only: the value),
    and ``hook_post``, the hidden layer that W_out reads.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        activation: str = "gelu",
        gated: bool = False,
        bias: bool = True,
        dropout: float = 0.0,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        super().__init__()
        if activation in GATED:
            activation, gated = GATED[activation], True
        self.act = activation_fn(activation)
        self.activation, self.gated, self.dropout = activation, gated, dropout
        if d_ff is None:
            d_ff = 4 * d_model if not gated else 8 * math.ceil(8 * d_model / 3 / 8)
        self.d_model, self.d_ff = d_model, d_ff
        k_in, k_out = 1.0 / math.sqrt(d_model), 1.0 / math.sqrt(d_ff)
        self.W_in = uniform((d_model, d_ff), k_in, dtype, device)
        self.b_in = constant((d_ff,), 0.0, dtype, device) if bias else None
        if gated:
            self.W_gate = uniform((d_model, d_ff), k_in, dtype, device)
            self.b_gate = constant((d_ff,), 0.0, dtype, device) if bias else None
        self.W_out = uniform((d_ff, d_model), k_out, dtype, device)
        self.b_out = constant((d_model,), 0.0, dtype, device) if bias else None
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()
        if gated:
            self.hook_pre_linear = HookPoint()

    def forward(self, x: Tensor) -> Tensor:
        if self.gated:
            gate = self.act(self.hook_pre(linear(x, self.W_gate, self.b_gate)))
            h = gate * self.hook_pre_linear(linear(x, self.W_in, self.b_in))
        else:
            h = self.act(self.hook_pre(linear(x, self.W_in, self.b_in)))
        h = self.hook_post(h)
        return dropout(linear(h, self.W_out, self.b_out), self.dropout, self.training)

    def extra_repr(self) -> str:
        kind = f"gated {self.activation}" if self.gated else self.activation
        return f"d_model={self.d_model}, d_ff={self.d_ff}, {kind}"
