"""Dropout: randomly zero activations while training (its mask, function and layer).

Inverted dropout multiplies by a keep-mask already scaled by 1/(1 - p), so that E[y] = x and
evaluation needs no rescaling. The product with a constant mask is an engine ``Mul``: its
backward, dx = g ⊙ m / (1 - p), needs no op of its own.
"""

from __future__ import annotations

import tensorlab as tl
from nn.checks import check_real
from nn.module import Module
from tensorlab import Tensor
from tensorlab.backend import acc_dtype, device_of, generator


def dropout_mask(shape, p: float, like):
    """An array of ``shape``: 0 with probability p, else 1/(1 - p), in ``like``'s dtype and on
    its device, drawn from that device's generator (``tl.manual_seed`` makes it repeatable).
    float16 and bfloat16 masks are drawn in float32 (the generators draw no half floats)."""
    draw = acc_dtype(like) or like.dtype
    keep = generator(device_of(like)).random(shape, dtype=draw) >= p
    return keep * like.dtype.type(1.0 / (1.0 - p))


def check_p(p: float, owner: str, name: str = "p") -> None:
    """A dropout probability is a number in [0, 1)."""
    check_real(name, p, 0.0, 1.0, open_hi=True, owner=owner)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Inverted dropout: zero each entry with probability p and scale the rest by 1/(1-p)
    (the identity when not training or p = 0)."""
    check_p(p, "dropout")
    if not training or p == 0.0:
        return x
    return x * tl.as_tensor(dropout_mask(x.shape, p, x.data))


class Dropout(Module):
    """Inverted dropout with probability ``p`` while training; the identity in eval mode
    (``.eval()``)."""

    def __init__(self, p: float = 0.1):
        super().__init__()
        check_p(p, "Dropout")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
