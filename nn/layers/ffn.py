"""Position-wise feed-forward block (the transformer's MLP), plain or gated."""

from __future__ import annotations

import math

import nn.functional as F
from nn.layers._util import constant, uniform
from nn.layers.activation import activation_fn
from nn.module import Module
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE

__all__ = ["FeedForward"]

# Gated variants (Shazeer 2020, "GLU Variants Improve Transformer"): name -> gate activation.
GATED = {"glu": "sigmoid", "reglu": "relu", "geglu": "gelu", "swiglu": "silu"}


class FeedForward(Module):
    """The MLP of a transformer block, applied to each position on its own.

    Plain (``gated=False``)::

        FFN(x) = f(x W_in + b_in) W_out + b_out

    Gated (Shazeer 2020): the hidden layer is an activated "gate" times a linear "value"::

        FFN(x) = (f(x W_gate + b_gate) ⊙ (x W_in + b_in)) W_out + b_out

    with f = σ (GLU), ReLU (ReGLU), GELU (GeGLU) or SiLU (SwiGLU). ``activation`` names f
    (relu, gelu, gelu_tanh, silu, ...); the names glu, reglu, geglu, swiglu choose the gated
    variant directly (``activation="swiglu"`` is ``activation="silu", gated=True``).

    Parameters (names as in the circuits literature): ``W_in`` (d_model, d_ff), ``W_gate``
    (d_model, d_ff, gated only), ``W_out`` (d_ff, d_model), biases ``b_in``, ``b_gate``
    (d_ff,) and ``b_out`` (d_model,) unless ``bias=False``. ``d_ff`` defaults to 4·d_model,
    and for gated variants to 8/3·d_model rounded up to a multiple of 8 (same parameter count
    as the plain 4× MLP: three matrices instead of two). ``dropout`` acts on the output (as in
    nanoGPT), before the residual add.
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
        device: str = "cpu",
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

    def forward(self, x: Tensor) -> Tensor:
        h = F.linear(x, self.W_in, self.b_in)
        if self.gated:
            h = self.act(F.linear(x, self.W_gate, self.b_gate)) * h
        else:
            h = self.act(h)
        return F.dropout(F.linear(h, self.W_out, self.b_out), self.dropout, self.training)

    def extra_repr(self) -> str:
        kind = f"gated {self.activation}" if self.gated else self.activation
        return f"d_model={self.d_model}, d_ff={self.d_ff}, {kind}"
