"""Multi-head attention (self, causal, cross), with hook points and a key/value cache.

Shapes: B batch, T_q query positions, T_k key positions, H heads of width d_head, and
d_model = H · d_head. Following "A Mathematical Framework for Transformer Circuits", head h
reads the residual stream through W_Q^h, W_K^h, W_V^h (d_model × d_head) and writes back
through W_O^h (d_head × d_model)::

    q = x W_Q^h,  k = x W_K^h,  v = x W_V^h,   A^h = softmax(q kᵀ/√d_head + mask),
    out = Σ_h (A^h v) W_O^h + b_O.

For speed the parameters are stored fused: ``W_QKV`` (d_model, 3, H, d_head) computes every
query, key and value in one matrix product, and ``W_O`` (H, d_head, d_model) is one product
too. The per-head matrices are strided *views* of them (no copy), as properties ``W_Q``,
``W_K``, ``W_V`` (H, d_model, d_head), ``W_O`` (H, d_head, d_model) and biases ``b_Q``,
``b_K``, ``b_V`` (H, d_head), ``b_O`` (d_model,). Cross-attention stores ``W_q``
(d_model, H, d_head) for the queries and ``W_kv`` (d_source, 2, H, d_head) for the keys and
values (they read different inputs), with the same views.

Hook points (identity modules a circuits tool can hook by name, e.g.
``blocks.0.attn.hook_pattern``): ``hook_q``, ``hook_k``, ``hook_v`` (B, T, H, d_head) before
any rotary embedding, ``hook_pattern`` (B, H, T_q, T_k), and ``hook_z`` (B, T_q, H, d_head),
the heads' outputs before W_O. With no hook registered, self-attention runs as one fused node
(``nn.fused.PackedSelfAttention``); once a hook is registered the layer takes the general
path, in which every hooked activation is a real Tensor that the hook may read or replace.
"""

from __future__ import annotations

import math

import nn.functional as F
from nn.fused import PackedSelfAttention
from nn.fused.attention import causal_keep
from nn.layers._util import constant, uniform
from nn.layers.positional import RelativePositionBias, RotaryEmbedding
from nn.module import HookPoint, Module
from tensorlab import Tensor, cat
from tensorlab.backend import DEFAULT_DTYPE, xp_of

__all__ = ["MultiHeadAttention", "KVCache"]


class KVCache:
    """The keys and values one attention layer has seen, for incremental decoding.

    Self-attention appends each step's keys and values (shape (B, H, T, d_head), after any
    rotary embedding); ``len(cache)`` is the number of cached positions, which is also the
    position of the next token. Cross-attention stores the source's keys and values on the
    first call and reuses them afterwards. Use one cache per layer and per sequence batch.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add new keys and values along the time axis; returns all of them."""
        if self.k is not None:
            k, v = cat([self.k, k], axis=-2), cat([self.v, v], axis=-2)
        self.k, self.v = k, v
        return k, v

    def reset(self) -> None:
        self.k = self.v = None


def _hooked(hook: HookPoint) -> bool:
    return bool(hook._forward_hooks or hook._forward_pre_hooks)


class MultiHeadAttention(Module):
    """Multi-head scaled dot-product attention.

    Args:
        d_model: width of the residual stream; n_head divides it.
        n_head: number of heads H (d_head = d_model / H).
        bias: learn biases for the projections.
        dropout: probability for dropout on the pattern and on the output (training only).
        causal: each query sees only keys at its own position or earlier.
        cross: keys and values come from ``source`` (an encoder's output) instead of ``x``.
        d_source: width of ``source`` (default d_model), for cross-attention.
        rotary: a :class:`RotaryEmbedding` (or True for one of width d_head) applied to
            queries and keys (self-attention only).
        relative_bias: a :class:`RelativePositionBias` (or an int max distance to make one)
            whose (H, T_q, T_k) bias is added to the scores.

    ``forward(x, source=None, key_padding_mask=None, mask=None, cache=None,
    return_pattern=False)``:

    - x (B, T_q, d_model); source (B, T_k, d_source) for cross-attention.
    - key_padding_mask (B, T_k) boolean, True at padding keys (ignored), as in PyTorch.
    - mask: boolean, broadcastable to (B, H, T_q, T_k), True where attending is allowed.
    - cache: a :class:`KVCache`; x then holds only the new positions.
    - return_pattern: also return the pattern (B, H, T_q, T_k) (a constant Tensor on the fused
      path; hook ``hook_pattern`` to get one that is differentiable).

    Returns (B, T_q, d_model) (and the pattern).
    """

    def __init__(
        self,
        d_model: int,
        n_head: int,
        bias: bool = True,
        dropout: float = 0.0,
        causal: bool = False,
        cross: bool = False,
        d_source: int | None = None,
        rotary: RotaryEmbedding | bool | None = None,
        relative_bias: RelativePositionBias | int | None = None,
        dtype=DEFAULT_DTYPE,
        device: str = "cpu",
    ):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        H, dh = n_head, d_model // n_head
        self.d_model, self.n_head, self.d_head = d_model, H, dh
        self.causal, self.cross, self.dropout = causal, cross, dropout
        self.scale = 1.0 / math.sqrt(dh)
        k = 1.0 / math.sqrt(d_model)
        if cross:
            self.d_source = d_source or d_model
            self.W_q = uniform((d_model, H, dh), k, dtype, device)
            self.W_kv = uniform(
                (self.d_source, 2, H, dh), 1 / math.sqrt(self.d_source), dtype, device
            )
            self.b_q = constant((H, dh), 0.0, dtype, device) if bias else None
            self.b_kv = constant((2, H, dh), 0.0, dtype, device) if bias else None
        else:
            self.W_QKV = uniform((d_model, 3, H, dh), k, dtype, device)
            self.b_QKV = constant((3, H, dh), 0.0, dtype, device) if bias else None
        self.W_O = uniform((H, dh, d_model), k, dtype, device)
        self.b_O = constant((d_model,), 0.0, dtype, device) if bias else None

        if rotary is True:
            rotary = RotaryEmbedding(dh)
        if rotary is not None and rotary is not False and cross:
            raise ValueError("rotary embeddings are for self-attention (cross=False)")
        self.rotary = rotary or None
        if isinstance(relative_bias, int) and not isinstance(relative_bias, bool):
            relative_bias = RelativePositionBias(H, relative_bias, dtype, device)
        self.relative_bias = relative_bias

        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()

    # ------------------------------------------------------------------ per-head views
    @property
    def W_Q(self) -> Tensor:
        """(H, d_model, d_head): W_Q[h] is head h's query matrix (a view, no copy)."""
        W = self.W_q if self.cross else self.W_QKV[:, 0]
        return W.permute(1, 0, 2)

    @property
    def W_K(self) -> Tensor:
        """(H, d_in, d_head) key matrices (views)."""
        return (self.W_kv[:, 0] if self.cross else self.W_QKV[:, 1]).permute(1, 0, 2)

    @property
    def W_V(self) -> Tensor:
        """(H, d_in, d_head) value matrices (views)."""
        return (self.W_kv[:, 1] if self.cross else self.W_QKV[:, 2]).permute(1, 0, 2)

    def _b(self, i: int) -> Tensor | None:
        if self.cross:
            b = self.b_q if i == 0 else self.b_kv
            return None if b is None else (b if i == 0 else b[i - 1])
        return None if self.b_QKV is None else self.b_QKV[i]

    @property
    def b_Q(self) -> Tensor | None:
        """(H, d_head) query biases (a view)."""
        return self._b(0)

    @property
    def b_K(self) -> Tensor | None:
        return self._b(1)

    @property
    def b_V(self) -> Tensor | None:
        return self._b(2)

    # ------------------------------------------------------------------ forward
    def _keep(self, key_padding_mask, mask):
        """One boolean mask (True = may attend) from the padding mask and the general mask."""
        keep = None
        if key_padding_mask is not None:
            kpm = key_padding_mask
            kpm = kpm.data if isinstance(kpm, Tensor) else xp_of(self.W_O.data).asarray(kpm)
            keep = ~kpm.astype(bool)[:, None, None, :]
        if mask is not None:
            m = mask.data if isinstance(mask, Tensor) else xp_of(self.W_O.data).asarray(mask)
            keep = m.astype(bool) if keep is None else keep & m.astype(bool)
        return keep

    def _fused_ok(self, cache) -> bool:
        return (
            not self.cross
            and cache is None
            and self.rotary is None
            and not _hooked(self.hook_q)
            and not _hooked(self.hook_k)
            and not _hooked(self.hook_v)
            and not _hooked(self.hook_pattern)
            and not _hooked(self.hook_z)
        )

    def forward(
        self,
        x: Tensor,
        source: Tensor | None = None,
        key_padding_mask=None,
        mask=None,
        cache: KVCache | None = None,
        return_pattern: bool = False,
    ):
        B, T, d = x.shape
        keep = self._keep(key_padding_mask, mask)
        p = self.dropout if self.training else 0.0
        if self._fused_ok(cache):
            qkv = F.linear(x, self.W_QKV.reshape(d, 3 * d), _flat(self.b_QKV))
            bias = () if self.relative_bias is None else (self.relative_bias(T, T),)
            sink = [] if return_pattern else None
            z = PackedSelfAttention.apply(
                qkv,
                *bias,
                n_head=self.n_head,
                scale=self.scale,
                causal=self.causal,
                mask=keep,
                dropout_p=p,
                sink=sink,
            )
            pattern = Tensor._wrap(sink[0]) if return_pattern else None
        else:
            z, pattern = self._attend(x, source, keep, cache, p, return_pattern)
        out = F.linear(z, self.W_O.reshape(d, d), self.b_O)
        out = F.dropout(out, p, self.training)
        return (out, pattern) if return_pattern else out

    def _attend(self, x, source, keep, cache, p, return_pattern):
        """The general path: every intermediate is a Tensor, passed through its hook point."""
        B, T, d = x.shape
        H, dh = self.n_head, self.d_head
        past = len(cache) if cache is not None else 0
        k = v = None
        if self.cross:
            q = F.linear(x, self.W_q.reshape(d, d), _flat(self.b_q)).reshape(B, T, H, dh)
            if cache is None or cache.k is None:
                if source is None:
                    raise ValueError("cross-attention needs a source (the encoder's output)")
                kv = F.linear(source, self.W_kv.reshape(self.d_source, 2 * d), _flat(self.b_kv))
                kv = kv.reshape(B, source.shape[1], 2, H, dh)
                k, v = kv[:, :, 0], kv[:, :, 1]
        else:
            qkv = F.linear(x, self.W_QKV.reshape(d, 3 * d), _flat(self.b_QKV))
            qkv = qkv.reshape(B, T, 3, H, dh)
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        q = self.hook_q(q).permute(0, 2, 1, 3)  # (B, H, T, d_head)
        if k is not None:
            k = self.hook_k(k).permute(0, 2, 1, 3)
            v = self.hook_v(v).permute(0, 2, 1, 3)
        if self.rotary is not None:
            q, k = self.rotary(q, offset=past), self.rotary(k, offset=past)
        if cache is not None:
            if not self.cross:
                k, v = cache.append(k, v)
            elif cache.k is None:
                cache.k, cache.v = k, v
            else:
                k, v = cache.k, cache.v
        T_k = k.shape[-2]
        bias = self.relative_bias(T, T_k) if self.relative_bias is not None else None

        pattern = None
        if _hooked(self.hook_pattern):  # composed, so the hook sees (and may edit) a Tensor
            scores = (q @ k.mT) * self.scale
            if bias is not None:
                scores = scores + bias
            allowed = keep
            if self.causal:
                c = causal_keep(xp_of(q.data), T, T_k)
                allowed = c if allowed is None else allowed & c
            if allowed is not None:
                scores = scores.masked_fill(~allowed, -float("inf"))
            pattern = self.hook_pattern(scores.softmax(axis=-1))
            z = F.dropout(pattern, p, True) @ v
        else:
            z = F.scaled_dot_product_attention(
                q,
                k,
                v,
                mask=keep,
                causal=self.causal,
                bias=bias,
                scale=self.scale,
                dropout_p=p,
                return_pattern=return_pattern,
            )
            if return_pattern:
                z, pattern = z
        z = self.hook_z(z.permute(0, 2, 1, 3))  # (B, T, H, d_head)
        return z.reshape(B, T, d), pattern

    def extra_repr(self) -> str:
        kind = "cross" if self.cross else ("causal" if self.causal else "self")
        return f"d_model={self.d_model}, n_head={self.n_head}, {kind}"


def _flat(b: Tensor | None) -> Tensor | None:
    return None if b is None else b.reshape(-1)
