"""Normalization layers over the last axis: LayerNorm and RMSNorm."""

from __future__ import annotations

import nn.functional as F
from nn.layers._util import constant
from nn.module import Module
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE

__all__ = ["LayerNorm", "RMSNorm"]


class LayerNorm(Module):
    """y = (x - μ)/√(σ² + eps) ⊙ w + b, with μ, σ² the mean and variance of the last axis.

    Parameters: ``w`` (d,) the gain γ (ones), ``b`` (d,) the bias β (zeros), or None with
    ``bias=False``. One fused node forward and backward (``nn.fused.norm``).
    """

    def __init__(
        self,
        d: int,
        eps: float = 1e-5,
        bias: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
    ):
        super().__init__()
        self.d, self.eps = d, eps
        self.w = constant((d,), 1.0, dtype, device)
        self.b = constant((d,), 0.0, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.w, self.b, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}, bias={self.b is not None}"


class RMSNorm(Module):
    """y = x/√(mean(x²) + eps) ⊙ w over the last axis (Zhang & Sennrich 2019): LayerNorm
    without centring and without bias. Parameter ``w`` (d,), ones."""

    def __init__(self, d: int, eps: float = 1e-6, dtype=DEFAULT_DTYPE, device: str = "cpu"):
        super().__init__()
        self.d, self.eps = d, eps
        self.w = constant((d,), 1.0, dtype, device)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.w, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"
