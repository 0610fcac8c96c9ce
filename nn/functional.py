"""Stateless layers and losses, imported as ``F`` (``import nn.functional as F``).

Each function takes Tensors (and, for layers with weights, the weights as Tensors) and returns
a Tensor. They live beside their layers and ops, one file per topic (``nn/linear.py``,
``nn/norm.py``, ...); this module gathers them under the names PyTorch users expect.

Conventions: a linear map is y = x W + b with W of shape (d_in, d_out); norms act on the last
axis; ``scaled_dot_product_attention`` takes (..., time, d), heads among the leading axes,
as PyTorch's does (``MultiHeadAttention`` holds them (batch, time, heads, d_head)).
"""

from nn.activation import elu, gelu, log_softmax, relu, sigmoid, silu, softmax, swish, tanh
from nn.attention import scaled_dot_product_attention
from nn.dropout import dropout
from nn.embedding import embedding
from nn.linear import linear
from nn.loss import cross_entropy, mse_loss
from nn.norm import layer_norm, rms_norm

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
