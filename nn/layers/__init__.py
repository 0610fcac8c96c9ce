"""Layers: each a Module (and, where it makes sense, a function in nn.functional).

linear, embedding, dropout, norm (LayerNorm, RMSNorm), activation, ffn (FeedForward),
positional (sinusoidal, learned, relative bias, rotary), attention (MultiHeadAttention,
KVCache).
"""

from nn.layers import activation, attention, dropout, embedding, ffn, linear, norm, positional
from nn.layers.activation import *  # noqa: F403
from nn.layers.attention import *  # noqa: F403
from nn.layers.dropout import *  # noqa: F403
from nn.layers.embedding import *  # noqa: F403
from nn.layers.ffn import *  # noqa: F403
from nn.layers.linear import *  # noqa: F403
from nn.layers.norm import *  # noqa: F403
from nn.layers.positional import *  # noqa: F403

__all__ = [
    name
    for m in (activation, attention, dropout, embedding, ffn, linear, norm, positional)
    for name in m.__all__
]
