"""Embeddings: the token lookup table, and positional information four ways.

- :class:`Embedding`: y = W[idx], one learned row per token id.
- :class:`SinusoidalPositionalEncoding` (Vaswani et al. 2017): fixed sines and cosines added
  to the token embeddings, PE(t, 2i) = sin(t ω_i), PE(t, 2i+1) = cos(t ω_i), ω_i = 10000^(-2i/d).
- :class:`LearnedPositionalEmbedding` (GPT-2): a learned vector per absolute position, added.
- :class:`RelativePositionBias`: a learned scalar per head and per (clipped) offset j - i,
  added to the attention scores (T5's scalars, Raffel et al. 2020; Shaw et al. 2018's clipping
  of |j - i| where T5 has log-spaced buckets).
- :class:`RotaryEmbedding` (RoPE, Su et al. 2021): queries and keys are rotated pair by pair by
  angles proportional to their position.

The last two plug into :class:`~nn.attention.SelfAttention` (its ``positions``); the two
before are added to the residual stream by the model. Each takes an ``offset``: the position
of the first token, for decoding with a cache.
"""

from __future__ import annotations

import numpy as np

from nn.init import constant, normal
from nn.module import Module
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE, default_device, min_max, xp_for, xp_of
from tensorlab.function import Function


# ---------------------------------------------------------------------- token embedding
def embedding(idx, W: Tensor) -> Tensor:
    """Rows of the table W (V, d) at the integer indices ``idx`` (any shape): (*idx.shape, d)."""
    data = idx.data if isinstance(idx, Tensor) else xp_of(W.data).asarray(idx)
    if data.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got dtype {data.dtype}")
    V = W.shape[0]
    lo, hi = min_max(data)
    if lo < 0 or hi >= V:
        raise ValueError(
            f"embedding: index {lo if lo < 0 else hi} is outside the table's rows 0..{V - 1}"
        )
    return W[data]  # integer indexing: its backward is the engine's scatter-add of rows


class Embedding(Module):
    """y = W[idx]: the row of the table for each integer index, shape (*idx.shape, d).

    Parameter ``W`` (num_embeddings, d), drawn from N(0, std²) (std 1 as in PyTorch; GPTs
    usually pass 0.02). Its gradient is a scatter-add of the gradient rows
    (``tensorlab/ops/index.py: scatter_add_rows``).
    """

    def __init__(
        self,
        num_embeddings: int,
        d: int,
        std: float = 1.0,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        super().__init__()
        self.num_embeddings, self.d = num_embeddings, d
        self.W = normal((num_embeddings, d), std, dtype, device)

    def forward(self, idx) -> Tensor:
        return embedding(idx, self.W)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.d}"


# ---------------------------------------------------------------------- positions
def sinusoidal_table(n_positions: int, d: int, base: float = 10000.0) -> np.ndarray:
    """The (n_positions, d) float64 table PE(t, 2i) = sin(t ω_i), PE(t, 2i+1) = cos(t ω_i),
    ω_i = base^(-2i/d)."""
    # (built once on the CPU, in float64; the layer moves it to its device)
    t = np.arange(n_positions, dtype=np.float64)[:, None]  # host: table
    omega = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # host: table
    pe = np.zeros((n_positions, d))  # host: table
    pe[:, 0::2] = np.sin(t * omega)  # host: table
    pe[:, 1::2] = np.cos(t * omega[: d // 2])  # host: table
    return pe


def _positions(table: Tensor, x: Tensor, offset: int) -> Tensor:
    """Rows offset, ..., offset + T - 1 of a (max_len, d) position table, broadcast to x (B, T,
    d), for the model to add to its token embeddings (as TransformerLens's ``PosEmbed``, so
    the sum can have a hook point between)."""
    T = x.shape[-2]
    if offset + T > table.shape[0]:
        raise ValueError(f"positions up to {offset + T} exceed max_len={table.shape[0]}")
    return table[offset : offset + T].expand(x.shape)


class SinusoidalPositionalEncoding(Module):
    """The position vectors of x (B, T, d): PE[offset : offset + T] broadcast to x's shape
    (:func:`_positions`). Fixed, nothing learned. The table is a non-persistent buffer ``pe``
    (max_len, d) (rebuilt, not saved in the state dict)."""

    def __init__(
        self,
        d: int,
        max_len: int = 4096,
        base: float = 10000.0,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        super().__init__()
        self.d, self.max_len = d, max_len
        table = sinusoidal_table(max_len, d, base).astype(np.dtype(dtype))
        self.register_buffer(
            "pe", Tensor(table, device=device or default_device()), persistent=False
        )

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return _positions(self.pe, x, offset)


class LearnedPositionalEmbedding(Module):
    """The position vectors of x (B, T, d): W_pos[offset : offset + T] broadcast to x's shape
    (:func:`_positions`). Parameter ``W_pos`` (max_len, d), drawn from N(0, std²)."""

    def __init__(
        self,
        max_len: int,
        d: int,
        std: float = 0.02,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        super().__init__()
        self.max_len, self.d = max_len, d
        self.W_pos = normal((max_len, d), std, dtype, device)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return _positions(self.W_pos, x, offset)


class RelativePositionBias(Module):
    """A learned score bias b_h(j - i) for head h, query position i and key position j, with the
    offset clipped to [-max_distance, max_distance]: offsets beyond share one value.

    Parameter ``W`` (n_head, 2·max_distance + 1); column ``max_distance + r`` holds the bias
    of offset r. ``forward(T_q, T_k)`` gives the (n_head, T_q, T_k) bias to add to the scores,
    queries being the last T_q of the T_k positions (as with a key/value cache)."""

    def __init__(
        self, n_head: int, max_distance: int = 16, dtype=DEFAULT_DTYPE, device: str | None = None
    ):
        super().__init__()
        self.n_head, self.max_distance = n_head, max_distance
        self.W = constant((n_head, 2 * max_distance + 1), 0.0, dtype, device)

    def offsets(self, T_q: int, T_k: int):
        """The clipped offsets j - i as column indices of W, shape (T_q, T_k)."""
        xp = xp_of(self.W.data)
        i = xp.arange(T_q)[:, None] + (T_k - T_q)
        j = xp.arange(T_k)[None, :]
        return xp.clip(j - i, -self.max_distance, self.max_distance) + self.max_distance

    def forward(self, T_q: int, T_k: int | None = None) -> Tensor:
        T_k = T_q if T_k is None else T_k
        return self.W[:, self.offsets(T_q, T_k)]


ROPE_LAYOUTS = ("interleaved", "half")


def _pairs(x, half: bool):
    """The two members (a, b) of every rotated pair of x (..., d), as views: (x_{2i}, x_{2i+1})
    for the interleaved layout, (x_i, x_{i + d/2}) for the half layout."""
    if half:
        p = x.reshape(x.shape[:-1] + (2, -1))
        return p, p[..., 0, :], p[..., 1, :]
    p = x.reshape(x.shape[:-1] + (-1, 2))
    return p, p[..., 0], p[..., 1]


class RotaryFn(Function):
    """Rotate each pair (a_i, b_i) of the last axis by the angle θ_{t,i} of its position t
    (Su et al. 2021)::

        y(a_i) = a_i cos θ - b_i sin θ
        y(b_i) = a_i sin θ + b_i cos θ

    The pairs are (x_{2i}, x_{2i+1}) (``half=False``, the paper's and Meta's original layout)
    or (x_i, x_{i+d/2}) (``half=True``, the "rotate half" layout of GPT-NeoX and of Hugging
    Face's Llama, Qwen2 and Mistral). ``cos`` and ``sin`` are arrays of θ's cosines and sines,
    broadcast against the pairs (x (..., d), pairs (..., d/2)).
    A rotation is orthogonal, so the backward is the rotation by -θ:
    dx = RotaryFn(g, cos, -sin), itself a RotaryFn node, hence differentiable to any order.
    """

    def forward(ctx, x, *, cos, sin, half):
        _, a, b = _pairs(x, half)
        y = xp_of(x).empty(x.shape, x.dtype)  # C order, so the pair views below are views
        _, ya, yb = _pairs(y, half)
        ya[...] = a * cos - b * sin
        yb[...] = a * sin + b * cos
        return y

    def backward(ctx, g):
        p = ctx.params
        return RotaryFn.apply(g, cos=p["cos"], sin=-p["sin"], half=p["half"])


def rope_frequencies(d_head: int, base: float, scaling: dict | None = None) -> np.ndarray:
    """θ_i = base^(-2i/d_head), i = 0 .. d_head/2 - 1 (float64), rescaled as ``scaling`` asks:

    - ``{"rope_type": "linear", "factor": f}``: every θ_i / f (positions interpolated,
      Chen et al. 2023), so f times as many positions span the trained angles;
    - ``{"rope_type": "llama3", "factor": f, "low_freq_factor": l, "high_freq_factor": h,
      "original_max_position_embeddings": n}`` (Llama 3.1): with wavelength λ_i = 2π/θ_i,
      θ_i is kept where λ_i < n/h (fast rotations, local information), divided by f where
      λ_i > n/l (slow ones), and in between blended: (1 - w) θ_i/f + w θ_i with
      w = (n/λ_i - l)/(h - l).
    """
    theta = base ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)  # host: table
    check_rope_scaling(scaling)
    if scaling is None:
        return theta
    kind, f = scaling["rope_type"], float(scaling["factor"])
    if kind == "linear":
        return theta / f
    lo, hi = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])  # llama3
    n = float(scaling["original_max_position_embeddings"])
    wavelength = 2 * np.pi / theta
    w = np.clip((n / wavelength - lo) / (hi - lo), 0.0, 1.0)  # host: 0 slow, 1 fast
    return (1 - w) * theta / f + w * theta


# The RoPE scalings rope_frequencies follows, and the numbers each needs.
ROPE_SCALINGS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def check_rope_scaling(scaling) -> None:
    """Refuse, in one line, a RoPE scaling dict :func:`rope_frequencies` cannot follow."""
    if scaling is None:
        return
    kind = scaling.get("rope_type") if isinstance(scaling, dict) else None
    if kind not in ROPE_SCALINGS:
        raise ValueError(
            f"rope_scaling={scaling!r}: rope_type must be one of {', '.join(ROPE_SCALINGS)}"
        )
    for key in ROPE_SCALINGS[kind]:
        v = scaling.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
            raise ValueError(f"rope_scaling {kind}: {key}={v!r} must be a number > 0")
    if kind == "llama3" and not scaling["high_freq_factor"] > scaling["low_freq_factor"]:
        raise ValueError("rope_scaling llama3: high_freq_factor must exceed low_freq_factor")


class RotaryEmbedding(Module):
    """Rotary position embedding for x (..., T, H, d_head): each pair of x at position t is
    rotated by the angle t θ_i, θ_i = base^(-2i/d_head) (see :func:`rope_frequencies` for
    ``scaling``). ``layout`` "interleaved" pairs (x_{2i}, x_{2i+1}); "half" pairs
    (x_i, x_{i+d/2}), as Hugging Face's Llama-family checkpoints expect (:class:`RotaryFn`).
    A query at i and a key at j then have a dot product that depends on i and j only through
    j - i (docs/derivations_nn.md, section 10). Nothing is learned; cos/sin tables are built
    once per dtype and grown on demand.
    """

    def __init__(
        self,
        d_head: int,
        base: float = 10000.0,
        layout: str = "interleaved",
        scaling: dict | None = None,
    ):
        super().__init__()
        if d_head % 2:
            raise ValueError(f"RotaryEmbedding: d_head must be even, got {d_head}")
        if layout not in ROPE_LAYOUTS:
            raise ValueError(f"RotaryEmbedding: layout={layout!r}, must be one of {ROPE_LAYOUTS}")
        self.d_head, self.base, self.layout, self.scaling = d_head, base, layout, scaling
        self.theta = rope_frequencies(d_head, base, scaling)
        self._tables: dict = {}

    def tables(self, n: int, dtype, device: str = "cpu"):
        """(cos, sin), each (n, d_head/2), for positions 0..n-1."""
        key = (np.dtype(dtype).str, device)
        cached = self._tables.get(key)
        if cached is None or cached[0].shape[0] < n:
            n = max(n, 2 * cached[0].shape[0] if cached else 64)
            angle = np.arange(n, dtype=np.float64)[:, None] * self.theta  # host: table
            xp = xp_for(device)
            cached = tuple(xp.asarray(f(angle).astype(dtype)) for f in (np.cos, np.sin))
            self._tables[key] = cached
        return cached

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Rotate x (..., T, H, d_head), the attention's layout: position ``offset + t`` for
        x[..., t, :, :], the same angles for every head."""
        if x.ndim < 3 or x.shape[-1] != self.d_head:
            raise ValueError(
                f"RotaryEmbedding(d_head={self.d_head}): x of shape {x.shape} is not "
                f"(..., T, H, {self.d_head})"
            )
        T = x.shape[-3]
        cos, sin = self.tables(offset + T, x.dtype, x.device)
        window = slice(offset, offset + T)
        return RotaryFn.apply(
            x, cos=cos[window, None, :], sin=sin[window, None, :], half=self.layout == "half"
        )

    def extra_repr(self) -> str:
        scaled = "" if self.scaling is None else f", scaling={self.scaling}"
        return f"d_head={self.d_head}, base={self.base}, layout={self.layout}{scaled}"
