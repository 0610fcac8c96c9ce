"""Embedding: a lookup table of vectors, one row per token id."""

from __future__ import annotations

import nn.functional as F
from nn.layers._util import normal
from nn.module import Module
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE

__all__ = ["Embedding"]


class Embedding(Module):
    """y = W[idx]: the row of the table for each integer index, shape (*idx.shape, d).

    Parameter ``W`` (num_embeddings, d), drawn from N(0, std²) (std 1 as in PyTorch; GPTs
    usually pass 0.02). Its gradient is a scatter-add of the gradient rows (``nn.fused``).
    """

    def __init__(
        self,
        num_embeddings: int,
        d: int,
        std: float = 1.0,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
    ):
        super().__init__()
        self.num_embeddings, self.d = num_embeddings, d
        self.W = normal((num_embeddings, d), std, dtype, device)

    def forward(self, idx) -> Tensor:
        return F.embedding(idx, self.W)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.d}"
