"""Stateless layers and losses, imported as ``F`` (``import nn.functional as F``).

Each function takes Tensors (and, for layers with weights, the weights as Tensors) and returns
a Tensor; the layer classes in ``nn.layers`` hold the weights and call these. Where a fused op
exists (``nn.fused``) the function uses it: one graph node with a closed-form backward.

Conventions: a linear map is y = x W + b with W of shape (d_in, d_out); norms act on the last
axis; attention tensors are (batch, heads, time, d_head).
"""

from __future__ import annotations

import math

import tensorlab as tl
from nn.fused import (
    CrossEntropy,
    DropoutFn,
    ELUFn,
    EmbeddingFn,
    GELUFn,
    GELUTanhFn,
    LayerNormFn,
    LinearFn,
    RMSNormFn,
    ScaledDotProductAttention,
    SiLUFn,
)
from tensorlab import Tensor
from tensorlab.backend import xp_of

__all__ = [
    "linear",
    "embedding",
    "dropout",
    "layer_norm",
    "rms_norm",
    "relu",
    "gelu",
    "silu",
    "swish",
    "elu",
    "sigmoid",
    "tanh",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "mse_loss",
    "scaled_dot_product_attention",
]


# ---------------------------------------------------------------------- linear and lookup
def linear(x: Tensor, W: Tensor, b: Tensor | None = None) -> Tensor:
    """y = x W + b for x (..., d_in), W (d_in, d_out), b (d_out,) or None."""
    return LinearFn.apply(x, W) if b is None else LinearFn.apply(x, W, b)


def embedding(idx, W: Tensor) -> Tensor:
    """Rows of the table W (V, d) at the integer indices ``idx`` (any shape): (*idx.shape, d)."""
    data = idx.data if isinstance(idx, Tensor) else xp_of(W.data).asarray(idx)
    if data.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got dtype {data.dtype}")
    return EmbeddingFn.apply(W, idx=data)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Inverted dropout: zero each entry with probability p and scale the rest by 1/(1-p)
    (identity when not training or p = 0). Draws from ``tensorlab``'s generator of x's device,
    so ``tl.manual_seed`` makes it reproducible."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return x
    return DropoutFn.apply(x, p=p)


# ---------------------------------------------------------------------- normalization
def layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """(x - mean(x)) / √(var(x) + eps) ⊙ weight + bias over the last axis (weight, bias (d,))."""
    if weight is None:
        if bias is not None:
            raise ValueError("layer_norm: a bias needs a weight (pass ones for a plain bias)")
        return LayerNormFn.apply(x, eps=eps)
    if bias is None:
        return LayerNormFn.apply(x, weight, eps=eps)
    return LayerNormFn.apply(x, weight, bias, eps=eps)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """x / √(mean(x²) + eps) ⊙ weight over the last axis (weight (d,))."""
    return RMSNormFn.apply(x, eps=eps) if weight is None else RMSNormFn.apply(x, weight, eps=eps)


# ---------------------------------------------------------------------- activations
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
    """x σ(x) (SiLU, also called Swish)."""
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


# ---------------------------------------------------------------------- losses
def cross_entropy(
    logits: Tensor,
    targets,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> Tensor:
    """Softmax cross-entropy of logits (N, C) or (B, T, C) against integer targets (N,) or
    (B, T). Targets equal to ``ignore_index`` contribute nothing (and "mean" averages over the
    others); ``label_smoothing`` ε mixes the one-hot target with the uniform distribution,
    q = (1 - ε) onehot + ε/C. ``reduction``: "mean", "sum" or "none" (per-target losses)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be mean, sum or none, not {reduction!r}")
    t = targets.data if isinstance(targets, Tensor) else xp_of(logits.data).asarray(targets)
    if t.shape != logits.shape[:-1]:
        raise ValueError(
            f"cross_entropy: logits of shape {logits.shape} need targets of shape "
            f"{logits.shape[:-1]}, got {t.shape}"
        )
    return CrossEntropy.apply(
        logits,
        targets=t,
        ignore_index=ignore_index,
        label_smoothing=float(label_smoothing),
        reduction=reduction,
    )


def mse_loss(input: Tensor, target, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Mean (or summed, or per-entry) squared error (input - target)²."""
    diff = input - target
    sq = diff * diff
    if reduction == "mean":
        return sq.mean()
    if reduction == "sum":
        return sq.sum()
    if reduction == "none":
        return sq
    raise ValueError(f"mse_loss: reduction must be mean, sum or none, not {reduction!r}")


# ---------------------------------------------------------------------- attention
def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask=None,
    causal: bool = False,
    bias: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_pattern: bool = False,
):
    """softmax(q kᵀ · scale + bias) v over q (..., T_q, d), k (..., T_k, d), v (..., T_k, d_v).

    - ``mask``: boolean, broadcastable to (..., T_q, T_k), True where a query *may* attend.
    - ``causal``: query i sees keys j ≤ i + (T_k - T_q) (aligned to the last keys, so it is
      right for a key/value cache; the lower triangle when T_q = T_k).
    - ``bias``: an additive score bias (e.g. a relative-position bias); it gets a gradient.
    - ``scale``: defaults to 1/√d.
    - ``return_pattern``: also return the pattern A (..., T_q, T_k) as a constant Tensor.

    One fused node: the backward is closed-form (see ``nn.fused.attention``).
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    m = None
    if mask is not None:
        m = mask.data if isinstance(mask, Tensor) else xp_of(q.data).asarray(mask)
        if m.dtype.kind != "b":
            raise TypeError("scaled_dot_product_attention: mask must be boolean (True = attend)")
    sink = [] if return_pattern else None
    inputs = (q, k, v) if bias is None else (q, k, v, bias)
    y = ScaledDotProductAttention.apply(
        *inputs, scale=scale, causal=causal, mask=m, dropout_p=dropout_p, sink=sink
    )
    if return_pattern:
        return y, tl.Tensor._wrap(sink[0])
    return y
