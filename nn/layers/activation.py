"""Activation functions as modules (each calls its ``nn.functional`` twin)."""

from __future__ import annotations

from collections.abc import Callable

import nn.functional as F
from nn.module import Module
from tensorlab import Tensor

__all__ = ["ReLU", "GELU", "SiLU", "Swish", "ELU", "Sigmoid", "Tanh", "activation_fn"]


class ReLU(Module):
    """max(x, 0)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    """x Φ(x) (``approximate="none"``) or its tanh approximation (``"tanh"``, GPT-2's)."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """x σ(x), also called Swish."""

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


Swish = SiLU


class ELU(Module):
    """x for x > 0, alpha (eˣ - 1) otherwise."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Sigmoid(Module):
    """1 / (1 + e^(-x))."""

    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


_BY_NAME: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, "tanh"),
    "silu": F.silu,
    "swish": F.silu,
    "elu": F.elu,
    "sigmoid": F.sigmoid,
    "tanh": F.tanh,
    "identity": lambda x: x,
}


def activation_fn(name: str) -> Callable[[Tensor], Tensor]:
    """The function called ``name``: relu, gelu (exact), gelu_tanh, silu/swish, elu,
    sigmoid, tanh, identity."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose from {sorted(_BY_NAME)}") from None
