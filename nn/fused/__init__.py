"""Fused ops: one graph node where the composed version would need many.

Each op here is a :class:`tensorlab.Function` whose forward runs on raw arrays and whose
backward has a closed form, derived in its docstring. Two things make them fast:

- the forward saves exactly what the closed-form backward needs (x̂ and 1/σ for layer norm,
  the softmax for cross-entropy and attention), so the backward does a few array passes;
- the first-order backward (``loss.backward()``, which the engine runs in ``no_grad``) is
  written on raw arrays, so it pays no per-op Tensor overhead.

Higher-order gradients still work. Under ``create_graph=True`` the engine runs backward with
grad recording on (``tensorlab.is_grad_enabled()`` is True there); each op then evaluates
the *same* closed form in Tensor ops, recomputing its saved quantities from the inputs so that
the gradient is itself differentiable. Tests hold both branches to each other, to the composed
ops, and to finite differences (``gradcheck``/``gradgradcheck``).
"""

from nn.fused.activation import ELUFn, Erf, GELUFn, GELUTanhFn, SiLUFn, erf
from nn.fused.attention import PackedSelfAttention, ScaledDotProductAttention
from nn.fused.cross_entropy import CrossEntropy
from nn.fused.dropout import DropoutFn
from nn.fused.embedding import EmbeddingFn
from nn.fused.linear import LinearFn
from nn.fused.norm import LayerNormFn, RMSNormFn
from nn.fused.rotary import Rotary
