"""Scaled dot-product attention as one node, with its backward derived by hand.

For one head, with queries Q (T_q, d), keys K (T_k, d), values V (T_k, d_v) and s = 1/√d::

    S = s Q Kᵀ + B        scores (B: an optional additive bias; masked entries are -∞)
    A = softmax_rows(S)   the attention pattern; each row sums to 1
    Y = A V

Backward, from G = dL/dY (the softmax step is the row-wise vector-Jacobian product
dS = A ⊙ (dA - rowsum(dA ⊙ A)), so no T_k × T_k Jacobian is ever built)::

    dV = Aᵀ G,   dA = G Vᵀ,   dS = A ⊙ (dA - rowsum(dA ⊙ A)),
    dQ = s dS K,   dK = s dSᵀ Q,   dB = dS.

A masked entry has A = 0, hence dS = 0: masks need no special case in the backward. With
dropout on the pattern, Y = (A ⊙ M) V for a scaled keep-mask M, and dA = (G Vᵀ) ⊙ M.

Two Functions share these kernels: :class:`ScaledDotProductAttention` takes Q, K, V of shape
(B, H, T, d) (``F.scaled_dot_product_attention``), and :class:`PackedSelfAttention` takes the
fused projection qkv (B, T, 3·H·d) of self-attention and returns heads already merged (B, T,
H·d). The packed form is MultiHeadAttention's fast path: splitting and merging heads happen
as strided views inside the node, not as five extra graph nodes.
"""

from __future__ import annotations

import tensorlab as tl
from nn.fused._util import const, recording, sum_last
from tensorlab.backend import device_of, generator, xp_of
from tensorlab.function import Function

_causal_cache: dict = {}


def causal_keep(xp, T_q: int, T_k: int):
    """Boolean (T_q, T_k): query i may see key j iff j ≤ i + (T_k - T_q).

    Queries are aligned with the *last* T_q keys, which is what a key/value cache needs (the
    new tokens come after the cached ones); for T_q = T_k it is the usual lower triangle.
    """
    return xp.tri(T_q, T_k, T_k - T_q, dtype=bool)


def _causal_bias(xp, T_q: int, T_k: int, dtype):
    """0 where allowed and -∞ where not, cached per shape, dtype and array module."""
    key = (xp.__name__, T_q, T_k, str(dtype))
    bias = _causal_cache.get(key)
    if bias is None:
        bias = xp.where(causal_keep(xp, T_q, T_k), 0.0, -xp.inf).astype(dtype)
        _causal_cache[key] = bias
    return bias


def _forward(ctx, q, k, v, bias, scale, causal, mask, dropout_p, out=None):
    """Y = softmax(s Q Kᵀ + B) V on arrays of shape (..., T, d); saves A for the backward."""
    xp = xp_of(q)
    S = q @ k.swapaxes(-1, -2)
    S *= scale
    if bias is not None:
        S += bias
    masked = causal or mask is not None
    if causal:
        S += _causal_bias(xp, q.shape[-2], k.shape[-2], S.dtype)
    if mask is not None:
        S = xp.where(mask, S, -xp.inf).astype(S.dtype, copy=False)
    m = S.max(axis=-1, keepdims=True)
    if masked:  # a row with every key masked gets A = 0 instead of NaN
        m[m == -xp.inf] = 0
    S -= m
    xp.exp(S, out=S)
    total = sum_last(S)
    if masked:
        total[total == 0] = 1
    S /= total
    ctx.A, ctx.drop, ctx.scale = S, None, scale
    if dropout_p > 0:
        keep = generator(device_of(q)).random(S.shape, dtype=S.dtype) >= dropout_p
        ctx.drop = keep * S.dtype.type(1.0 / (1.0 - dropout_p))
        S = S * ctx.drop
    return xp.matmul(S, v, out=out)


def _backward(ctx, G, q, k, v, dq=None, dk=None, dv=None):
    """The closed-form backward on arrays; returns (dQ, dK, dV, dS) (dS = dB, unscaled)."""
    xp = xp_of(G)
    A = ctx.A
    Ad = A if ctx.drop is None else A * ctx.drop
    dv = xp.matmul(Ad.swapaxes(-1, -2), G, out=dv)
    dS = G @ v.swapaxes(-1, -2)  # dA, turned into dS in place
    if ctx.drop is not None:
        dS *= ctx.drop
    dS *= A
    dS -= A * sum_last(dS)
    dSs = dS * ctx.scale
    dq = xp.matmul(dSs, k, out=dq)
    dk = xp.matmul(dSs.swapaxes(-1, -2), q, out=dk)
    return dq, dk, dv, dS


def _dead_rows(xp, T_q: int, T_k: int, causal: bool, mask):
    """Boolean (..., T_q, 1): True for query rows that may attend to no key; None if none."""
    allowed = causal_keep(xp, T_q, T_k) if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is None:
        return None
    dead = ~allowed.any(axis=-1, keepdims=True)
    return dead if dead.any() else None


def _backward_graph(ctx, G, q, k, v, bias, causal, mask):
    """The same backward in Tensor ops, with A recomputed from q and k (for create_graph)."""
    S = (q @ k.mT) * ctx.scale
    if bias is not None:
        S = S + bias
    xp = xp_of(q.data)
    if causal:
        S = S + const(_causal_bias(xp, q.shape[-2], k.shape[-2], S.dtype))
    if mask is not None:
        S = tl.where(const(mask), S, -xp.inf)
    dead = _dead_rows(xp, q.shape[-2], k.shape[-2], causal, mask)
    if dead is not None:  # rows with every key masked: A = 0, as in the forward (not NaN)
        S = tl.where(const(dead), 0.0, S)
    A = S.softmax(axis=-1)
    if dead is not None:
        A = tl.where(const(dead), 0.0, A)
    Ad = A if ctx.drop is None else A * const(ctx.drop)
    dv = Ad.mT @ G
    dA = G @ v.mT
    if ctx.drop is not None:
        dA = dA * const(ctx.drop)
    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))
    return (dS @ k) * ctx.scale, (dS.mT @ q) * ctx.scale, dv, dS


class ScaledDotProductAttention(Function):
    """Y = softmax(Q Kᵀ/√d + B) V over the last two axes (see the module docstring for the
    backward). ``apply(q, k, v)`` or ``apply(q, k, v, bias)`` with q (..., T_q, d),
    k (..., T_k, d), v (..., T_k, d_v), bias broadcastable to (..., T_q, T_k); keyword
    parameters ``scale``, ``causal``, ``mask`` (boolean array, True = may attend),
    ``dropout_p``, and ``sink`` (a list that receives the pattern A, or None)."""

    def forward(ctx, q, k, v, *bias, scale, causal, mask, dropout_p, sink):
        ctx.causal, ctx.mask = causal, mask
        y = _forward(ctx, q, k, v, bias[0] if bias else None, scale, causal, mask, dropout_p)
        if sink is not None:
            sink.append(ctx.A)
        return y

    def backward(ctx, g):
        q, k, v = ctx.inputs[:3]
        bias = ctx.inputs[3] if len(ctx.inputs) == 4 else None
        if recording():
            grads = _backward_graph(ctx, g, q, k, v, bias, ctx.causal, ctx.mask)
        else:
            grads = _backward(ctx, g.data, q.data, k.data, v.data)
        return grads if bias is not None else grads[:3]


def _heads(a, n_head: int, i: int, n: int):
    """Part i of n of a packed (B, T, n·H·d) array, as a (B, H, T, d) strided view."""
    B, T, width = a.shape
    return a.reshape(B, T, n, n_head, width // (n * n_head))[:, :, i].transpose(0, 2, 1, 3)


class PackedSelfAttention(Function):
    """Multi-head self-attention on a packed projection: qkv (B, T, 3·H·d) holds Q, K, V side
    by side, each split into H heads of width d; returns the heads' outputs merged, (B, T, H·d).
    The math is :class:`ScaledDotProductAttention`'s; the backward writes dQ, dK, dV straight
    into the slots of one (B, T, 3·H·d) gradient. Parameters: ``n_head``, ``scale``,
    ``causal``, ``mask`` (broadcastable to (B, H, T, T)), ``dropout_p``, ``sink``."""

    def forward(ctx, qkv, *bias, n_head, scale, causal, mask, dropout_p, sink):
        xp = xp_of(qkv)
        B, T, width = qkv.shape
        ctx.n_head, ctx.causal, ctx.mask = n_head, causal, mask
        q, k, v = (_heads(qkv, n_head, i, 3) for i in range(3))
        y = xp.empty((B, T, width // 3), dtype=qkv.dtype)
        b = bias[0] if bias else None
        _forward(ctx, q, k, v, b, scale, causal, mask, dropout_p, out=_heads(y, n_head, 0, 1))
        if sink is not None:
            sink.append(ctx.A)
        return y

    def backward(ctx, g):
        qkv = ctx.inputs[0]
        H = ctx.n_head
        if recording():
            B, T, width = qkv.shape
            parts = qkv.reshape(B, T, 3, H, width // (3 * H)).permute(2, 0, 3, 1, 4)
            q, k, v = parts[0], parts[1], parts[2]
            G = g.reshape(B, T, H, -1).permute(0, 2, 1, 3)
            bias = ctx.inputs[1] if len(ctx.inputs) == 2 else None
            dq, dk, dv, dS = _backward_graph(ctx, G, q, k, v, bias, ctx.causal, ctx.mask)
            dqkv = tl.stack([dq, dk, dv], axis=0).permute(1, 3, 0, 2, 4).reshape(qkv.shape)
            return (dqkv, dS) if bias is not None else dqkv
        a = qkv.data
        dqkv = xp_of(a).empty_like(a)
        q, k, v = (_heads(a, H, i, 3) for i in range(3))
        outs = [_heads(dqkv, H, i, 3) for i in range(3)]
        G = _heads(g.data, H, 0, 1)
        *_, dS = _backward(ctx, G, q, k, v, *outs)
        return (dqkv, dS) if len(ctx.inputs) == 2 else dqkv
