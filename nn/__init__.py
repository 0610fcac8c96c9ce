"""nn: modules, layers, losses, optimizers and serialization on the tensorlab engine.

Shaped like ``torch.nn`` so that a PyTorch user is at home: ``nn.Module``, ``nn.Linear``,
``nn.functional as F``, ``nn.optim.AdamW``. One file per topic holds a layer, its function
and its op(s): ``linear``, ``embedding`` (+ positions), ``norm``, ``activation`` (+ the
feed-forward block), ``dropout``, ``attention``, ``loss``.
"""

from nn.activation import ELU, GELU, FeedForward, ReLU, Sigmoid, SiLU, Swish, Tanh, activation_fn
from nn.attention import (
    CrossAttention,
    KVCache,
    MultiHeadAttention,
    SelfAttention,
    composed_attention,
)
from nn.dropout import Dropout
from nn.embedding import (
    Embedding,
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)
from nn.linear import Linear
from nn.module import (
    HookPoint,
    Module,
    ModuleDict,
    ModuleList,
    Parameter,
    Sequential,
    evaluating,
    module_scopes,
)
from nn.norm import LayerNorm, RMSNorm, composed_norms

from nn import amp, distributed, functional, init, optim, serialization  # isort: skip
