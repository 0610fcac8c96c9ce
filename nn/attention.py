"""Scaled dot-product attention (its op and its composed form) and multi-head attention.

For one head, with queries Q (T_q, d), keys K (T_k, d), values V (T_k, d_v) and s = 1/√d::

    S = s Q Kᵀ + B        scores (B: an optional additive bias; masked entries are -∞)
    A = softmax_rows(S)   the attention pattern; each row sums to 1
    Y = A V

Backward, from G = dL/dY, with D = rowsum(dA ⊙ A) = rowsum(G ⊙ Y) (FlashAttention-2's D)::

    dV = Aᵀ G,   dA = G Vᵀ,   dS = A ⊙ (dA - D),   dQ = s dS K,   dK = s dSᵀ Q,   dB = dS.

A masked entry has A = 0, hence dS = 0; a query that may attend to no key gets A = 0 and
Y = 0, not NaN. With dropout, Y = (A ⊙ M) V and dA = (G Vᵀ) ⊙ M. docs/derivations_nn.md
(section 9) derives these, the unnormalized pattern E = exp(S - m) that :class:`AttentionFn`
keeps, and its blocks of causal queries (:func:`query_blocks`).

The math is written twice, and only twice: :class:`AttentionFn`, one graph node with the
closed-form backward on arrays, and :func:`attention_composed`, the same function in engine
ops, every intermediate a Tensor a hook can read or replace. A layer's ``fused`` attribute
picks one (True by default); ``create_graph=True`` differentiates the composed form.

The layers: :class:`SelfAttention` and :class:`CrossAttention` over what they share,
:class:`MultiHeadAttention`. Following "A Mathematical Framework for Transformer Circuits",
head h reads the residual stream through W_Q^h, W_K^h, W_V^h (d_model × d_head) and writes
back through W_O^h (d_head × d_model)::

    q = x W_Q^h + b_Q^h,  k = x W_K^h + b_K^h,  v = x W_V^h + b_V^h,
    A^h = softmax(q kᵀ/√d_head + mask),   out = Σ_h (A^h v) W_O^h + b_O.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

import tensorlab as tl
from nn import flash_attention
from nn.dropout import check_p, dropout, dropout_mask
from nn.embedding import RelativePositionBias, RotaryEmbedding
from nn.init import constant, uniform
from nn.linear import linear
from nn.module import HookPoint, Module, close_hook_points, identity, switched
from tensorlab import Tensor, cat
from tensorlab.backend import DEFAULT_DTYPE, device_of, in_float32, rounded, xp_of
from tensorlab.function import Function
from tensorlab.fused import array_math, fused

_causal_cache: dict = {}


def causal_keep(xp, T_q: int, T_k: int, window: int | None = None):
    """Boolean (T_q, T_k): query i may see key j iff j ≤ i + (T_k - T_q) (queries aligned with
    the *last* T_q keys, as a key/value cache needs), and with a sliding ``window`` W also
    i + (T_k - T_q) - j < W (itself and the W - 1 keys before it, Mistral's)."""
    keep = xp.tri(T_q, T_k, T_k - T_q, dtype=bool)
    if window is not None:
        keep &= ~xp.tri(T_q, T_k, T_k - T_q - window, dtype=bool)
    return keep


def _causal_bias(xp, T_q: int, T_k: int, dtype, window: int | None = None):
    """0 where allowed and -∞ where not, cached per shape, window, dtype and array module."""
    key = (xp.__name__, T_q, T_k, window, str(dtype))
    bias = _causal_cache.get(key)
    if bias is None:
        bias = xp.where(causal_keep(xp, T_q, T_k, window), 0.0, -xp.inf).astype(dtype)
        _causal_cache[key] = bias
    return bias


def _dead_rows(xp, T_q: int, T_k: int, causal: bool, mask, window: int | None = None):
    """Boolean (..., T_q, 1): True for query rows that may attend to no key; None if none.
    (A sliding window alone never empties a causal row, whose query sees at least its own
    position; with a mask it can: every key in the window may be masked.)"""
    allowed = causal_keep(xp, T_q, T_k, window) if causal else None
    if mask is not None:
        allowed = mask if allowed is None else allowed & mask
    if allowed is None:
        return None
    dead = ~allowed.any(axis=-1, keepdims=True)
    return dead if dead.any() else None


def _heads_first(a):
    """(..., T, H, d) -> (..., H, T, d), a strided view (no copy)."""
    return a.swapaxes(-3, -2)


def _matmul_into(a, b, shape, dtype):
    """a @ b, of shape (..., H, T, d), written into a new (..., T, H, d) array: the product of
    every head goes straight to the layout the rest of the layer reads."""
    xp = xp_of(a)
    out = xp.empty(shape, dtype=dtype)
    xp.matmul(a, b, out=_heads_first(out))
    return out


# Causal attention on the CPU in query blocks (docs/derivations_nn.md, section 9): with n equal
# blocks the (T_q, T_k) arrays shrink to (n + 1)/2n of their size. Blocks have at least
# BLOCK_ROWS queries, so that their products stay large (benchmarks/bench_attention_blocks.py
# measures the sizes), and there are at most MAX_BLOCKS. (A GPU writes no (T_q, T_k) array:
# nn/flash_attention.cu.)
BLOCK_ROWS = 128
MAX_BLOCKS = 4


def query_blocks(T_q: int, T_k: int, causal: bool, window: int | None, rows: int) -> list[tuple]:
    """(rows, keys): slices of the queries and of the keys they may see, covering every query
    once. One block (all of both) unless ``causal`` with T_q ≥ 2·rows and T_k ≥ T_q; then
    min(MAX_BLOCKS, T_q // rows) blocks, whose query rows [r0, r1) see keys
    [lo, r1 + T_k - T_q), lo = 0, or the first key the sliding window lets row r0 see."""
    offset = T_k - T_q
    n = min(MAX_BLOCKS, T_q // rows) if causal and offset >= 0 else 1
    if n <= 1:
        return [(slice(None), slice(None))]
    edges = [T_q * i // n for i in range(n + 1)]
    first = lambda r0: 0 if window is None else max(0, r0 + offset - window + 1)  # noqa: E731
    return [(slice(r0, r1), slice(first(r0), r1 + offset)) for r0, r1 in zip(edges, edges[1:])]


def _cut(a, rows: slice, keys: slice):
    """The (rows, keys) block of an array broadcast to the scores (..., T_q, T_k), or None;
    an axis of length 1 (broadcast) is kept whole."""
    if a is None:
        return None
    if a.ndim < 2:
        return a[..., keys] if a.shape[-1] != 1 else a
    return a[
        ..., rows if a.shape[-2] != 1 else slice(None), keys if a.shape[-1] != 1 else slice(None)
    ]


def _unnormalized_pattern(q, kT, bias, causal, mask, window):
    """E = exp(S - m) and its row sums l for S = Q (s Kᵀ) + B (masked: -∞), m the row maxima,
    for one block of queries (..., T_q, H, d) and the keys they may see, given as s Kᵀ
    (..., H, d, T_k); the heads first: E (..., H, T_q, T_k), l (..., H, T_q, 1)."""
    xp = xp_of(q)
    S = _heads_first(q) @ kT  # s Q Kᵀ
    if bias is not None:
        S += bias
    T_q, T_k = q.shape[-3], kT.shape[-1]
    if causal:
        S += _causal_bias(xp, T_q, T_k, S.dtype, window)
    if mask is not None:
        S = xp.where(mask, S, -xp.inf).astype(S.dtype, copy=False)
    if S.shape[-1]:
        m = row_max(S)
    else:  # no keys at all (T_k = 0): the output is empty or zero, as in PyTorch
        m = xp.zeros(S.shape[:-1] + (1,), S.dtype)
    # A row with every key masked gets A = 0, not NaN. Only a mask, a causal mask with
    # more queries than keys, or no keys at all can leave a row empty (each query sees at
    # least its own key).
    maybe_empty = mask is not None or (causal and T_q > T_k) or T_k == 0
    if maybe_empty:
        m[m == -xp.inf] = 0
    exp_shifted_in_place(S, m)  # S becomes E
    E = S
    total = array_math(E).sum(E, axis=-1, keepdims=True)  # l
    if maybe_empty:  # elsewhere every row holds an exp(0) = 1
        total[total == 0] = 1
    return E, total


class AttentionFn(Function):
    """Y = softmax(s Q Kᵀ + B) V for every head, as one node (the module docstring gives the
    backward). ``apply(q, k, v)`` or ``apply(q, k, v, bias)`` with, as TransformerLens lays
    them out, q (..., T_q, H, d), k (..., T_k, H_kv, d), v (..., T_k, H_kv, d_v) and
    Y (..., T_q, H, d_v), where H_kv divides H and query head h reads key/value head
    h // (H / H_kv) (grouped-query attention; H_kv = H: plain multi-head); the scores, the
    pattern and the bias are (..., H, T_q, T_k) (bias broadcast to it). Parameters
    ``scale``, ``causal``, ``window`` (a sliding window for the causal mask, or None:
    :func:`causal_keep`), ``mask`` (boolean array, True = may attend, broadcast to the
    scores, or None) and ``dropout_mask`` (the scaled keep-mask M on the pattern, or None).
    Heads are strided views inside the node: no copies. float16 and bfloat16 inputs are
    computed in float32 and the output rounded back once, like the norms.

    Two runners of the one formula (:data:`RUNNERS`, chosen by the inputs' device). On the
    CPU the pattern is kept unnormalized, A = E / l (E = exp(S - m), l its row sums), and
    Y = (E V) / l; the backward reads Y (so Y must not be changed in place before it). Long
    causal inputs go in blocks of queries (:func:`query_blocks`), whose shares of dK and dV
    are summed. On a GPU (:mod:`nn.flash_attention`) no pattern is kept: each row's maximum
    and 1/l are, and the backward recomputes the pattern tile by tile."""

    saves_output = True

    def forward(ctx, q, k, v, *bias, **params):
        H, H_kv = q.shape[-2], k.shape[-2]
        if H_kv == 0 or H % H_kv or v.shape[-2] != H_kv:
            raise ValueError(
                f"attention: the keys' and values' heads must be one number that divides the "
                f"{H} query heads (grouped-query attention); got {H_kv} and {v.shape[-2]}"
            )
        ctx.runner = RUNNERS[device_of(q)]
        return ctx.runner[0](ctx, q, k, v, *bias, **params)

    def backward(ctx, g):
        return ctx.runner[1](ctx, g)


def _forward_in_blocks(ctx, q, k, v, *bias, scale, causal, mask, dropout_mask, window=None):
    """AttentionFn's forward on the CPU: products of whole blocks of scores (BLAS's work),
    the unnormalized pattern E of each block kept for the backward."""
    xp, (q, half) = xp_of(q), in_float32(q)
    k, v = _kv_per_query_head(k, q), _kv_per_query_head(v, q)
    if half:
        k, v = k.astype(q.dtype), v.astype(q.dtype)
        bias = tuple(b.astype(q.dtype) for b in bias)
    score_bias = bias[0] if bias else None
    ctx.blocks = query_blocks(q.shape[-3], k.shape[-3], causal, window, BLOCK_ROWS)
    ctx.E, sums = [], []  # E and l (..., H, T_q, 1) block by block
    Y = xp.empty(q.shape[:-1] + v.shape[-1:], dtype=v.dtype)
    kT = _transposed(k, scale)  # s Kᵀ, once for every block
    for rows, keys in ctx.blocks:
        E, l = _unnormalized_pattern(
            q[..., rows, :, :],
            kT[..., keys],
            _cut(score_bias, rows, keys),
            causal,
            _cut(mask, rows, keys),
            window,
        )
        ctx.E.append(E)
        sums.append(l)
        P = E if dropout_mask is None else E * _cut(dropout_mask, rows, keys)
        xp.matmul(P, _heads_first(v[..., keys, :, :]), out=_heads_first(Y[..., rows, :, :]))
    total = sums[0] if len(sums) == 1 else xp.concatenate(sums, axis=-2)  # the blocks' rows
    Y /= _heads_first(total)  # (..., T_q, H, 1)
    ctx.total = total
    ctx.Y = Y  # the output itself, or for half inputs its float32 value (T_q, H, d_v)
    return rounded(Y, half)


def _backward_in_blocks(ctx, g):
    """AttentionFn's backward on the CPU, from the blocks' E and row sums l."""
    dtype = ctx.total.dtype  # float32 for half inputs: the backward runs in float32 too
    q, k, v = (t.data.astype(dtype, copy=False) for t in ctx.inputs[:3])
    H_kv = k.shape[-2]
    k, v = _kv_per_query_head(k, q), _kv_per_query_head(v, q)
    M, s = ctx.params["dropout_mask"], ctx.params["scale"]
    g = g.data.astype(dtype, copy=False)  # (..., T_q, H, d_v), as Y
    bias = ctx.inputs[3:]
    dB_needed = bool(bias) and bias[0].requires_grad
    xp = xp_of(g)
    inv = 1.0 / ctx.total  # 1/l, (..., H, T_q, 1)
    G_l = _heads_first(g * _heads_first(inv))  # G/l, heads first
    GY = g * ctx.Y
    D = _heads_first(array_math(GY).sum(GY, axis=-1, keepdims=True))  # rowsum(G ⊙ Y)
    if not dB_needed:  # s/l: the scale of dQ and dK goes in with 1/l
        inv *= s
    whole = len(ctx.blocks) == 1
    dq = xp.empty(q.shape, q.dtype)  # every query's rows come from its own block
    dk, dv = (None, None) if whole else (xp.zeros(k.shape, dtype), xp.zeros(v.shape, dtype))
    dB = None
    for (rows, keys), E in zip(ctx.blocks, ctx.E):
        q_b, k_b, v_b = q[..., rows, :, :], k[..., keys, :, :], v[..., keys, :, :]
        M_b = _cut(M, rows, keys)
        P = E if M_b is None else E * M_b
        dv_b = _matmul_into(P.swapaxes(-1, -2), G_l[..., rows, :], v_b.shape, dtype)  # Eᵀ G/l
        dA = _heads_first(g[..., rows, :, :]) @ _transposed(v_b)  # G Vᵀ
        if M_b is not None:
            dA *= M_b
        D_b, inv_b = D[..., rows, :], inv[..., rows, :]
        softmax_grad_in_place(dA, D_b, E, inv_b)  # dA becomes s dS
        dS = dA
        xp.matmul(dS, _heads_first(k_b), out=_heads_first(dq[..., rows, :, :]))  # s dS K
        dk_b = _matmul_into(dS.swapaxes(-1, -2), _heads_first(q_b), k_b.shape, dtype)
        if whole:
            dk, dv = dk_b, dv_b  # s dSᵀ Q, Aᵀ G
        else:  # (into views: `a[i] += b` would also write the view back onto itself)
            for acc, share in ((dk, dk_b), (dv, dv_b)):
                view = acc[..., keys, :, :]
                view += share
        if dB_needed and whole:
            dB = dS
        elif dB_needed:  # dB = dS, zero where no block reached (masked for every query)
            if dB is None:
                dB = xp.zeros(dS.shape[:-2] + (q.shape[-3], k.shape[-3]), dtype)
            dB[..., rows, keys] = dS
    if dB_needed:
        dq *= s
        dk *= s
    if H_kv != q.shape[-2]:  # each key/value head's gradient: the sum over its query heads
        G = q.shape[-2] // H_kv
        dk, dv = (a.reshape(a.shape[:-2] + (H_kv, G, a.shape[-1])).sum(axis=-2) for a in (dk, dv))
    return dq, dk, dv, dB


def _kv_per_query_head(a, q):
    """Keys or values (..., T_k, H_kv, w) with each of the H_kv heads repeated for the
    H / H_kv query heads that read it (grouped-query attention), as arrays; a itself when
    H_kv = H."""
    G = q.shape[-2] // a.shape[-2]
    return a if G == 1 else xp_of(a).repeat(a, G, axis=-2)


# AttentionFn's runners, by device: (forward, backward). One formula; on the CPU it runs as
# BLAS products of blocks of scores, on a GPU as nn/flash_attention.cu's tiles.
RUNNERS = {
    "cpu": (_forward_in_blocks, _backward_in_blocks),
    "cuda": (flash_attention.forward, flash_attention.backward),
}


def _transposed(k, scale: float = 1.0):
    """s Kᵀ of k (..., T, H, d) heads first, (..., H, d, T), written in that layout: OpenBLAS
    multiplies (T, d)(d, T) faster with a right operand whose rows are Kᵀ's than with K read
    transposed. At the nanoGPT CPU config's (12, 4) heads of (64, 32): 199 µs against 156
    with the copy included (benchmarks/bench_kernels.py's attention, session 25). The scale s
    rides along with the copy (no pass of its own over Q)."""
    xp, kT = xp_of(k), _heads_first(k).swapaxes(-1, -2)
    return xp.multiply(kT, scale, out=xp.empty(kT.shape, kT.dtype))  # (× 1.0 is exact)


@fused(rows=True)
def row_max(xp, S):
    """m = max_j S_ij, each row's largest score (..., 1): the shift of the softmax. A NaN in
    a row is its maximum, as in NumPy. (On the CPU one compiled loop: NumPy's own reduction
    over the nanoGPT CPU config's (12, 4, 64, 64) scores took 182 µs against its 26, session
    24.)"""
    return xp.max(S, axis=-1, keepdims=True)


@fused
def exp_shifted_in_place(xp, S, m):
    """S ← exp(S - m), m the row maxima (broadcast): the pattern's numerators E, written over
    the scores (two passes on NumPy, one kernel on a GPU)."""
    S -= m
    xp.exp(S, out=S)


@fused
def softmax_grad_in_place(xp, dA, D, E, c):
    """dA ← (dA - D) ⊙ E ⊙ c: dS = A ⊙ (dA - D) with A = E/l and D = rowsum(dA ⊙ A), times s
    when c = s/l (c = 1/l otherwise), written over dA (three passes on NumPy, one kernel on a
    GPU)."""
    dA -= D
    dA *= E
    dA *= c


def attention_composed(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *bias: Tensor,
    scale: float,
    causal: bool,
    mask,
    dropout_mask,
    window: int | None = None,
    hook_scores=identity,
    hook_pattern=identity,
) -> Tensor:
    """:class:`AttentionFn`'s function in engine ops, one step a line (same layouts).
    ``hook_scores`` sees the scores S (masked entries -∞) and ``hook_pattern`` the pattern A,
    both (..., H, T_q, T_k), and may replace them."""
    G = q.shape[-2] // k.shape[-2]  # grouped-query attention: query heads per key/value head
    k, v = repeat_heads(k, G, -2), repeat_heads(v, G, -2)
    q, k, v = (t.transpose(-3, -2) for t in (q, k, v))  # heads first: (..., H, T, d)
    S = (q @ k.mT) * scale
    if bias:
        S = S + bias[0]
    xp = xp_of(q.data)
    T_q, T_k = q.shape[-2], k.shape[-2]
    if causal:
        S = S + tl.as_tensor(_causal_bias(xp, T_q, T_k, S.dtype, window))
    if mask is not None:
        S = S.masked_fill(~mask, -math.inf)
    S = hook_scores(S)
    dead = _dead_rows(xp, T_q, T_k, causal, mask, window)
    if dead is not None:  # rows with every key masked: A = 0, as in AttentionFn (not NaN)
        S = tl.where(dead, 0.0, S)
    A = S.softmax(axis=-1)
    if dead is not None:
        A = tl.where(dead, 0.0, A)
    A = hook_pattern(A)
    if dropout_mask is not None:
        A = A * tl.as_tensor(dropout_mask)
    return (A @ v).transpose(-3, -2)


AttentionFn.composed = staticmethod(attention_composed)  # the same function in engine ops


def repeat_heads(t: Tensor, G: int, axis: int) -> Tensor:
    """Key/value heads on ``axis`` repeated to the G query heads each one serves (identity
    when G = 1): head h reads key/value head h // G. A new axis of G copies is broadcast
    after the heads' axis and merged into it, so the backward is a sum over that axis
    (``sum_to``): each key/value head gets its group's gradients added up."""
    if G == 1:
        return t
    ax = axis % t.ndim
    before, after = t.shape[: ax + 1], t.shape[ax + 1 :]
    copies = t.reshape(before + (1,) + after).broadcast_to(before + (G,) + after)
    return copies.reshape(t.shape[:ax] + (t.shape[ax] * G,) + after)


def _array(a, like):
    """A mask given as a Tensor, an array or Python data, as an array on ``like``'s device."""
    return a.data if isinstance(a, Tensor) else xp_of(like).asarray(a)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask=None,
    causal: bool = False,
    bias: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    fused: bool = True,
) -> Tensor:
    """softmax(q kᵀ · scale + bias) v over q (..., T_q, d), k (..., T_k, d), v (..., T_k, d_v),
    as in PyTorch (every leading axis, heads included, is a batch axis).

    - ``mask``: boolean, broadcastable to (..., T_q, T_k), True where a query *may* attend.
    - ``causal``: query i sees keys j ≤ i + (T_k - T_q) (:func:`causal_keep`).
    - ``bias``: an additive score bias (e.g. a relative-position bias); it gets a gradient.
    - ``scale``: defaults to 1/√d.
    - ``dropout_p``: dropout on the pattern (pass 0 in evaluation).
    - ``fused``: one node (:class:`AttentionFn`), or the composed ops
      (:func:`attention_composed`); the same numbers up to rounding, and the same dropout draws.

    (Heads are a batch axis here, so q, k, v get :class:`AttentionFn`'s heads axis of 1.)
    """
    check_p(dropout_p, "scaled_dot_product_attention")
    one_head = lambda t: t.reshape(t.shape[:-1] + (1, t.shape[-1]))  # noqa: E731
    scores_axis = lambda a: a if a.ndim < 2 else a.reshape(a.shape[:-2] + (1,) + a.shape[-2:])  # noqa: E731
    m = None if mask is None else _array(mask, q.data)
    if m is not None and m.dtype.kind != "b":
        raise TypeError(f"attention: mask must be boolean (True = may attend), got {m.dtype}")
    params = dict(
        scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else scale,
        causal=causal,
        mask=None if m is None else scores_axis(m),
        dropout_mask=None,
    )
    if dropout_p > 0:
        shape = q.shape[:-2] + (1, q.shape[-2], k.shape[-2])
        params["dropout_mask"] = dropout_mask(shape, dropout_p, q.data)
    inputs = [one_head(q), one_head(k), one_head(v)] + ([] if bias is None else [scores_axis(bias)])
    attend = AttentionFn.apply if fused else attention_composed
    y = attend(*inputs, **params)
    return y.reshape(y.shape[:-2] + y.shape[-1:])


class KVCache:
    """The keys and values one attention layer has seen, for incremental decoding (one cache
    per layer and per sequence batch). Self-attention appends each step's (B, T, H_kv, d_head),
    after any rotary embedding; ``len(cache)`` is the number of cached positions, ``seen`` the
    number appended so far (the next token's position). With a sliding window W only the last
    W - 1 are kept (all a later query can see). Cross-attention keeps the source's keys and
    values from its first call."""

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.seen = 0

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-3]

    def append(self, k: Tensor, v: Tensor, window: int | None = None) -> tuple[Tensor, Tensor]:
        """Add new keys and values along the time axis; returns all of them (the ones kept
        and the new ones). With a ``window`` only the last ``window - 1`` stay cached."""
        self.seen += k.shape[-3]
        if self.k is not None:
            k, v = cat([self.k, k], axis=-3), cat([self.v, v], axis=-3)
        self.k, self.v = k, v
        if window is not None and k.shape[-3] > window - 1:
            keep = slice(k.shape[-3] - (window - 1), None)
            self.k, self.v = k[..., keep, :, :], v[..., keep, :, :]
        return k, v

    def reset(self) -> None:
        self.k = self.v = None
        self.seen = 0


class MultiHeadAttention(Module):
    """Multi-head scaled dot-product attention: what :class:`SelfAttention` and
    :class:`CrossAttention` share (the projections, the heads, the hooks, the attention itself).
    Build one of those two.

    Heads: ``n_head`` query heads H of width ``d_head`` (default d_model / H) and ``n_kv_head``
    key/value heads H_kv dividing H (default H; fewer is grouped-query attention: each serves
    H / H_kv consecutive query heads, docs/modern_decoders.md). ``bias``: True (every
    projection), False (none), ``"qkv"`` (the query, key and value projections only, as Qwen2)
    or ``"out"`` (the output projection only). ``dropout``: on the pattern and on the output
    (training only). ``attn.fused`` (default True) takes :class:`AttentionFn`; False takes
    :func:`attention_composed`, whose scores and pattern can be hooked.

    Parameters, in the row-vector convention of ``nn.Linear`` (y = x W + b): ``W_q``
    (d_model, H, d_head), ``W_k`` and ``W_v`` (d_in, H_kv, d_head) with d_in = d_source for
    cross-attention; ``W_O`` (H, d_head, d_model), which sums over heads and d_head in one
    product; 1-D biases ``b_q`` (H·d_head,), ``b_k``, ``b_v`` (H_kv·d_head,) and ``b_O``
    (d_model,). The per-head matrices of the circuits notation, per *query* head: ``W_Q``,
    ``W_K``, ``W_V`` (H, d_in, d_head) and ``b_Q``, ``b_K``, ``b_V`` (H, d_head), views
    (key/value heads repeated to their query heads, as TransformerLens does).

    Hook points, in TransformerLens's names and layouts (docs/interpretability.md): ``hook_q``
    (B, T, H, d_head), ``hook_k``, ``hook_v`` (B, T, H_kv, d_head, before rotary embedding),
    ``hook_attn_scores`` and ``hook_pattern`` (B, H, T_q, T_k; composed path only),
    ``hook_z`` (B, T_q, H, d_head) and ``hook_result`` (B, T_q, H, d_model; only with
    ``use_attn_result``, see :func:`attention_results`).

    Masks, in ``forward``: key_padding_mask (B, T_k) boolean, True at padding keys (ignored),
    as in PyTorch; mask boolean, broadcastable to (B, H, T_q, T_k), True where attending is
    allowed; cache a :class:`KVCache`, with x then holding only the new positions.
    """

    cross = False  # keys and values from a source other than x
    rotary = relative_bias = None  # a position scheme (self-attention only)

    def __init__(
        self, d_model, n_head, d_head, n_kv_head, d_in, bias, dropout, causal, dtype, device
    ):
        super().__init__()
        name = type(self).__name__
        if d_head is None:
            if d_model % n_head:
                raise ValueError(
                    f"{name}: d_model={d_model} is not divisible by n_head={n_head}; choose "
                    "them so, or give d_head"
                )
            d_head = d_model // n_head
        check_p(dropout, name, "dropout")
        H, dh = n_head, d_head
        H_kv = H if n_kv_head is None else n_kv_head
        if isinstance(H_kv, bool) or not isinstance(H_kv, int) or H_kv < 1 or H % H_kv:
            raise ValueError(
                f"{name}: n_kv_head={n_kv_head!r} must be a whole number ≥ 1 dividing n_head={H}"
            )
        if bias not in (True, False, "qkv", "out"):
            raise ValueError(f"{name}: bias={bias!r} must be True, False, 'qkv' or 'out'")
        window = None if isinstance(causal, bool) else causal
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ValueError(
                f"{name}: causal={causal!r} must be True, False or a sliding window W ≥ 1 (an int)"
            )
        self.d_model, self.n_head, self.d_head, self.n_kv_head = d_model, H, dh, H_kv
        self.causal, self.window, self.dropout = bool(causal), window, dropout
        self.scale = 1.0 / math.sqrt(dh)
        self.d_source = d_in
        self.W_q = uniform((d_model, H, dh), 1.0 / math.sqrt(d_model), dtype, device)
        self.W_k = uniform((d_in, H_kv, dh), 1.0 / math.sqrt(d_in), dtype, device)
        self.W_v = uniform((d_in, H_kv, dh), 1.0 / math.sqrt(d_in), dtype, device)
        self.W_O = uniform((H, dh, d_model), 1.0 / math.sqrt(H * dh), dtype, device)
        widths = (("b_q", H * dh), ("b_k", H_kv * dh), ("b_v", H_kv * dh))
        for name, width in (*widths, ("b_O", d_model)):
            on = bias in (True, "qkv") if name != "b_O" else bias in (True, "out")
            setattr(self, name, constant((width,), 0.0, dtype, device) if on else None)
        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()
        self.hook_result = HookPoint()
        self.fused = True
        self.use_attn_result = False

    @property
    def fused(self) -> bool:
        return self._fused

    def _inner_hooks(self) -> tuple[HookPoint, HookPoint]:
        return self.hook_attn_scores, self.hook_pattern

    @fused.setter
    def fused(self, value: bool) -> None:
        close_hook_points(
            self._inner_hooks(),
            "the attention is fused (one node, no scores or pattern as Tensors); set "
            "attn.fused = False, or use nn.composed_attention(model) or gpt.circuits"
            if value
            else None,
            "MultiHeadAttention.fused = True: remove the hooks on hook_attn_scores and "
            "hook_pattern first (the fused path has no scores or pattern to hook)",
        )
        object.__setattr__(self, "_fused", bool(value))

    @property
    def use_attn_result(self) -> bool:
        return self._use_attn_result

    @use_attn_result.setter
    def use_attn_result(self, value: bool) -> None:
        close_hook_points(
            [self.hook_result],
            None
            if value
            else "per-head results are off (W_O sums over heads in one product); set "
            "attn.use_attn_result = True, or use nn.attention.attention_results(model) or "
            "gpt.circuits",
            "MultiHeadAttention.use_attn_result = False: remove the hooks on hook_result "
            "first (without it the heads' outputs are summed inside one product)",
        )
        object.__setattr__(self, "_use_attn_result", bool(value))

    # ------------------------------------------------------------------ per-head views
    def _per_query_head(self, t: Tensor, axis: int) -> Tensor:
        """Key/value heads on ``axis`` repeated to the query heads they serve
        (:func:`repeat_heads`, G = H / H_kv)."""
        return repeat_heads(t, self.n_head // self.n_kv_head, axis)

    def _kv_head_bias(self, b: Tensor | None) -> Tensor | None:
        """A key or value bias (H_kv · d_head,) as (H, d_head): its heads repeated to the
        query heads they serve."""
        if b is None:
            return None
        return self._per_query_head(b.reshape(-1, self.d_head), 0)

    @property
    def W_Q(self) -> Tensor:
        """(H, d_model, d_head): W_Q[h] is head h's query matrix (a view of W_q, no copy)."""
        return self.W_q.permute(1, 0, 2)

    @property
    def W_K(self) -> Tensor:
        """(H, d_in, d_head) key matrices of the query heads (a view of W_k, or its key heads
        repeated under grouped-query attention)."""
        return self._per_query_head(self.W_k.permute(1, 0, 2), 0)

    @property
    def W_V(self) -> Tensor:
        """(H, d_in, d_head) value matrices of the query heads (as :attr:`W_K`)."""
        return self._per_query_head(self.W_v.permute(1, 0, 2), 0)

    @property
    def b_Q(self) -> Tensor | None:
        """(H, d_head) query biases (a view of b_q; one per query head, never repeated)."""
        return None if self.b_q is None else self.b_q.reshape(self.n_head, self.d_head)

    @property
    def b_K(self) -> Tensor | None:
        """(H, d_head) key biases of the query heads (as :attr:`W_K`)."""
        return self._kv_head_bias(self.b_k)

    @property
    def b_V(self) -> Tensor | None:
        """(H, d_head) value biases of the query heads (as :attr:`W_V`)."""
        return self._kv_head_bias(self.b_v)

    # ------------------------------------------------------------------ forward
    def _project(self, x: Tensor, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Every head's queries from x and keys and values from src: (B, T, H or H_kv, d_head)."""
        q = self.hook_q(linear(x, self.W_q, self.b_q))
        k = self.hook_k(linear(src, self.W_k, self.b_k))
        return q, k, self.hook_v(linear(src, self.W_v, self.b_v))

    def _heads(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask, mask, cache) -> Tensor:
        """The attention of every head and W_O's sum over them, (B, T_q, d_model)."""
        # k, v: (B, T_k, H_kv, d_head); attention reads head h // G for query head h
        scores = q.shape[:-3] + (self.n_head,) + q.shape[-3:-2] + k.shape[-3:-2]
        keep = self._keep(key_padding_mask, mask, scores, cache)
        z = self.hook_z(self.attend(q, k, v, keep))
        if self.use_attn_result:  # each head's output in the residual basis, then their sum
            out = self.hook_result(head_results(z, self.W_O)).sum(axis=-2)
            out = out if self.b_O is None else out + self.b_O
        else:
            out = linear(z, self.W_O, self.b_O, in_dims=2)  # Σ over heads and d_head
        return dropout(out, self.dropout, self.training)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, keep) -> Tensor:
        """softmax(q kᵀ/√d_head + bias + mask) v per head, (B, T_q, H, d_head): one node when
        ``self.fused``, else the composed ops with the score and pattern hooks."""
        T_q, T_k = q.shape[-3], k.shape[-3]
        bias = () if self.relative_bias is None else (self.relative_bias(T_q, T_k),)
        p = self.dropout if self.training else 0.0
        shape = q.shape[:-3] + (self.n_head, T_q, T_k)  # of the scores
        drop = dropout_mask(shape, p, q.data) if p > 0 else None
        params = dict(
            scale=self.scale, causal=self.causal, mask=keep, dropout_mask=drop, window=self.window
        )
        if self.fused:
            return AttentionFn.apply(q, k, v, *bias, **params)
        hooks = dict(hook_scores=self.hook_attn_scores, hook_pattern=self.hook_pattern)
        return attention_composed(q, k, v, *bias, **params, **hooks)

    def _keep(self, key_padding_mask, mask, scores: tuple, cache):
        """One boolean mask (True = may attend) from the padding mask and the general mask,
        checked against the scores' shape (B, H, T_q, T_k): the keys are the cached ones and
        the new ones (a sliding window's cache keeps the last W - 1)."""
        keep, held = None, ""
        if cache is not None:  # the errors say which keys the call attends to
            held = f" ({scores[-1]} with the cache: the keys it holds and the new ones)"
        if key_padding_mask is not None:
            kpm = _array(key_padding_mask, self.W_O.data)
            if kpm.shape != (scores[0], scores[-1]):
                raise ValueError(
                    f"MultiHeadAttention: key_padding_mask of shape {kpm.shape} needs (batch, "
                    f"keys) = {(scores[0], scores[-1])}{held}"
                )
            keep = ~kpm.astype(bool)[:, None, None, :]
        if mask is not None:
            m = _array(mask, self.W_O.data).astype(bool)
            try:
                fits = np.broadcast_shapes(m.shape, scores) == scores
            except ValueError:
                fits = False
            if not fits:
                raise ValueError(
                    f"MultiHeadAttention: mask of shape {m.shape} does not broadcast to the "
                    f"scores (batch, heads, queries, keys) = {scores}{held}"
                )
            keep = m if keep is None else keep & m
        return keep

    def extra_repr(self) -> str:
        kind = "cross" if self.cross else ("causal" if self.causal else "self")
        kind += "" if self.window is None else f", window={self.window}"
        kv = "" if self.n_kv_head == self.n_head else f", n_kv_head={self.n_kv_head}"
        path = "fused" if self.fused else "composed"
        path += ", per-head results" if self.use_attn_result else ""
        return (
            f"d_model={self.d_model}, n_head={self.n_head}{kv}, d_head={self.d_head}, {kind}, "
            f"{path}"
        )


class SelfAttention(MultiHeadAttention):
    """Attention of a sequence to itself, bidirectional or causal (the other arguments: see
    :class:`MultiHeadAttention`). ``causal``: True lets each query see only keys at its own
    position or earlier; an int W is a causal sliding window (Mistral): each query sees itself
    and the W - 1 positions before it. ``positions``: a :class:`RotaryEmbedding` applied to
    queries and keys, or a :class:`RelativePositionBias` added to the scores, or None.

    ``forward(x, key_padding_mask=None, mask=None, cache=None)``: x (B, T, d_model) → (B, T,
    d_model); with a cache, x holds only the new positions.
    """

    def __init__(
        self,
        d_model: int,
        n_head: int,
        d_head: int | None = None,
        n_kv_head: int | None = None,
        bias: bool | str = True,
        dropout: float = 0.0,
        causal: bool | int = False,
        positions: RotaryEmbedding | RelativePositionBias | None = None,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        super().__init__(
            d_model, n_head, d_head, n_kv_head, d_model, bias, dropout, causal, dtype, device
        )
        if isinstance(positions, RotaryEmbedding):
            self.rotary = positions
        elif isinstance(positions, RelativePositionBias):
            self.relative_bias = positions
        elif positions is not None:
            raise TypeError(
                f"SelfAttention: positions must be a RotaryEmbedding, a RelativePositionBias "
                f"or None, not {type(positions).__name__}"
            )

    def forward(
        self, x: Tensor, key_padding_mask=None, mask=None, cache: KVCache | None = None
    ) -> Tensor:
        q, k, v = self._project(x, x)
        if self.rotary is not None:
            past = 0 if cache is None else cache.seen
            q, k = self.rotary(q, offset=past), self.rotary(k, offset=past)
        if cache is not None:
            k, v = cache.append(k, v, self.window)
        return self._heads(q, k, v, key_padding_mask, mask, cache)


class CrossAttention(MultiHeadAttention):
    """Attention of a sequence x to another, ``source`` (an encoder's output): queries from x,
    keys and values from the source (``d_source`` wide, default d_model), no causal mask.

    ``forward(x, source=None, key_padding_mask=None, mask=None, cache=None)``: x (B, T_q,
    d_model), source (B, T_k, d_source) → (B, T_q, d_model). A :class:`KVCache` keeps the
    source's keys and values from the first call (later calls may leave the source out).
    """

    cross = True

    def __init__(
        self,
        d_model: int,
        n_head: int,
        d_source: int | None = None,
        d_head: int | None = None,
        n_kv_head: int | None = None,
        bias: bool | str = True,
        dropout: float = 0.0,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        d_in = d_model if d_source is None else d_source
        super().__init__(
            d_model, n_head, d_head, n_kv_head, d_in, bias, dropout, False, dtype, device
        )

    def forward(
        self,
        x: Tensor,
        source: Tensor | None = None,
        key_padding_mask=None,
        mask=None,
        cache: KVCache | None = None,
    ) -> Tensor:
        if cache is not None and cache.k is not None:  # the source's keys and values, kept
            q, k, v = self.hook_q(linear(x, self.W_q, self.b_q)), cache.k, cache.v
        elif source is None:
            raise ValueError("CrossAttention needs a source (the encoder's output)")
        else:
            q, k, v = self._project(x, source)
            if cache is not None:
                cache.k, cache.v = k, v
        return self._heads(q, k, v, key_padding_mask, mask, cache)


def head_results(z: Tensor, W_O: Tensor) -> Tensor:
    """Each head's output in the residual basis, z^h W_O^h, (..., T, H, d_model) from z (..., T,
    H, d_head) and W_O (H, d_head, d_model), without the bias b_O (TransformerLens's
    ``hook_result``). Summed over heads it is ``linear(z, W_O, in_dims=2)``."""
    return (z.transpose(-3, -2) @ W_O).transpose(-3, -2)


def composed_attention(model: Module) -> contextlib.AbstractContextManager:
    """A ``with`` block in which every :class:`MultiHeadAttention` in ``model`` takes the
    composed path (``fused = False``), so ``hook_attn_scores`` and ``hook_pattern`` can be
    hooked; each goes back to its own setting afterwards, except a layer whose scores or
    pattern still carry a hook (:func:`nn.module.switched`). ``gpt.circuits`` runs its hooks
    inside this."""
    return switched(model, MultiHeadAttention, "fused", False, MultiHeadAttention._inner_hooks)


def attention_results(model: Module) -> contextlib.AbstractContextManager:
    """A ``with`` block in which every :class:`MultiHeadAttention` in ``model`` computes each
    head's output on its own (``use_attn_result = True``), so ``hook_result`` (B, T, H,
    d_model) can be read or replaced; afterwards as :func:`composed_attention`. The attention
    itself keeps its path (fused or not)."""
    return switched(model, MultiHeadAttention, "use_attn_result", True, lambda m: [m.hook_result])
