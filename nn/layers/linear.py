"""Linear: the affine map y = x W + b."""

from __future__ import annotations

import math

import nn.functional as F
from nn.layers._util import constant, uniform
from nn.module import Module
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE

__all__ = ["Linear"]


class Linear(Module):
    """y = x W + b, acting on the last axis of x.

    Parameters: ``W`` (d_in, d_out), the row-vector convention of the circuits notation
    (x W_Q); ``b`` (d_out,), or None with ``bias=False``. W starts as U(-1/√d_in, 1/√d_in)
    (PyTorch's default scale), b as zeros.
    """

    def __init__(
        self, d_in: int, d_out: int, bias: bool = True, dtype=DEFAULT_DTYPE, device: str = "cpu"
    ):
        super().__init__()
        self.d_in, self.d_out = d_in, d_out
        self.W = uniform((d_in, d_out), 1.0 / math.sqrt(d_in), dtype, device)
        self.b = constant((d_out,), 0.0, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.W, self.b)

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_out={self.d_out}, bias={self.b is not None}"
