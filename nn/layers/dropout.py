"""Dropout: randomly zero activations while training."""

from __future__ import annotations

import nn.functional as F
from nn.module import Module
from tensorlab import Tensor

__all__ = ["Dropout"]


class Dropout(Module):
    """Inverted dropout with probability ``p``: in training, each entry is zeroed with
    probability p and the others are scaled by 1/(1-p), so the expected value is unchanged; in
    eval mode (``.eval()``) it is the identity. Draws come from ``tensorlab``'s generator, so
    ``tl.manual_seed`` makes them reproducible."""

    def __init__(self, p: float = 0.1):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
