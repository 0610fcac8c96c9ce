"""Activations and the transformer's feed-forward block.

The smooth activations GELU (exact and tanh form), SiLU and ELU are each one node written as
two formulas, the forward and the local gradient (:class:`tensorlab.fused_op.FusedFunction`:
NumPy runs them block by block, CuPy compiles each into one kernel, and the forward run on
Tensors is what ``create_graph`` differentiates). ReLU, sigmoid, tanh and erf are engine ops
(``x.relu()``, ``x.sigmoid()``, ``tensorlab.ops.special.erf``). Their functions and modules
follow, then :class:`FeedForward`, the MLP that uses them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from nn.dropout import dropout
from nn.init import constant, uniform
from nn.linear import linear
from nn.module import HookPoint, Module
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE
from tensorlab.fused_op import FusedFunction

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_C = math.sqrt(2.0 / math.pi)  # the tanh form's √(2/π) and its cubic coefficient
_TANH_K = 0.044715


class GELUFn(FusedFunction):
    """y = x Φ(x), Φ(x) = ½(1 + erf(x/√2)) the standard normal CDF (Hendrycks & Gimpel 2016);
    dx = g (Φ(x) + x φ(x)),  φ(x) = e^(-x²/2)/√(2π) the normal density. Saves Φ(x)."""

    saves = 1

    @staticmethod
    def forward_math(xp, x):
        cdf = 0.5 + 0.5 * xp.erf(x * _SQRT_HALF)
        return x * cdf, cdf

    @staticmethod
    def backward_math(xp, g, cdf, x):
        pdf = xp.exp(-0.5 * x * x) * _INV_SQRT_2PI
        return g * (cdf + x * pdf)


class GELUTanhFn(FusedFunction):
    """The tanh form of GELU (GPT-2's): y = ½ x (1 + t),  t = tanh(u),  u = c (x + k x³)
    with c = √(2/π), k = 0.044715;
    dx = g (½(1 + t) + ½ x (1 - t²) c (1 + 3k x²)). Saves t."""

    saves = 1

    @staticmethod
    def forward_math(xp, x):
        t = xp.tanh(_TANH_C * (x + _TANH_K * x * x * x))
        return 0.5 * x * (1.0 + t), t

    @staticmethod
    def backward_math(xp, g, t, x):
        du = _TANH_C * (1.0 + 3 * _TANH_K * x * x)
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


class SiLUFn(FusedFunction):
    """y = x s, s = sigmoid(x) = 1/(1 + e^(-x)) (SiLU, a.k.a. Swish with β = 1);
    dx = g s (1 + x (1 - s)). Saves s. (e^(-x) = ∞ far below zero gives s = 0 and y = -0,
    the limit.)"""

    saves = 1

    @staticmethod
    def forward_math(xp, x):
        s = 1.0 / (1.0 + xp.exp(-x))
        return x * s, s

    @staticmethod
    def backward_math(xp, g, s, x):
        return g * s * (1.0 + x * (1.0 - s))


class ELUFn(FusedFunction):
    """y = x for x > 0, α(eˣ - 1) otherwise (Clevert et al. 2015);
    dx = g for x > 0, g α eˣ otherwise (α at x = 0, as in PyTorch).

    The negative branch exponentiates min(x, 0) written as ``where(x > 0, 0, x)``, so that
    nothing overflows for large x and the derivative at the kink is the branch's own: autograd
    of ``minimum`` would split a tie ½/½ and give α/2 at x = 0."""

    @staticmethod
    def forward_math(xp, x, alpha=1.0):
        return xp.where(x > 0, x, alpha * xp.expm1(xp.where(x > 0, 0.0, x)))

    @staticmethod
    def backward_math(xp, g, x, alpha=1.0):
        return g * xp.where(x > 0, 1.0, alpha * xp.exp(xp.where(x > 0, 0.0, x)))


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
    return ELUFn.apply(x, alpha=float(alpha))


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


def default_d_ff(d_model: int, gated: bool) -> int:
    """The MLP's width when none is given: 4·d_model, or for a gated MLP (two input matrices)
    8/3·d_model rounded up to a multiple of 8, which keeps its parameter count (LLaMA's rule)."""
    return 8 * math.ceil(8 * d_model / 3 / 8) if gated else 4 * d_model


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
            d_ff = default_d_ff(d_model, gated)
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
