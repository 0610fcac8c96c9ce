"""AttentionFn's runner on a GPU: the kernels of ``flash_attention.cu``, which never write the
(T_q, T_k) scores or pattern to memory.

The formula is :class:`nn.attention.AttentionFn`'s (its module docstring; derived in
docs/derivations_nn.md, section 9). On the CPU it runs as products of whole blocks of scores
(BLAS does the work there); here each query row walks its keys a tile at a time with an online
softmax and keeps only its statistics m and 1/l for the backward, which recomputes the pattern
from them, tile by tile (``flash_attention.cu`` explains the kernels). Memory is O(T) per head
instead of O(T_q T_k): no pattern is saved, only the output and two numbers a row.

float16 and bfloat16 are read as they are and widened in the kernel (no float32 copy of q, k
and v); every sum is in float32 (float64 for float64 inputs), and the output and the
gradients are rounded to the inputs' type once, as the kernels write them (no cast kernels).

The module is compiled by CuPy (NVRTC) once per element type and head widths, on first use.
``tests/cuda_compile.py`` compiles it without a GPU and ``tests/fake_cupy.py`` runs it on the
CPU (``tests/cuda_emulator.py``), so both steps are tested before a GPU sees it.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from tensorlab import backend
from tensorlab.backend import xp_of

SOURCE = (Path(__file__).parent / "flash_attention.cu").read_text()
SHARED_BYTES = 48 * 1024  # static shared memory a block may use (CUDA's limit without opt-in)

_C_TYPES = {
    "float32": "float",
    "float64": "double",
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
}


def tile_rows(d: int, d_v: int, itemsize: int) -> int:
    """Threads per block (and rows per tile): 32, halved until the backward's largest block,
    which holds TILE rows of k, v (padded), q and g and three numbers a row, fits in shared
    memory."""
    tile = 32
    while tile > 1 and tile * (2 * d + 2 * d_v + 5) * itemsize > SHARED_BYTES:
        tile //= 2
    return tile


def options(dtype: str, d: int, d_v: int) -> tuple[str, ...]:
    """The -D options that compile the module for inputs of ``dtype`` and these head widths."""
    acc = np.dtype(np.float64 if dtype == "float64" else np.float32)
    return (
        f"-DELEMENT={_C_TYPES[dtype]}",
        f"-DACCUMULATOR={_C_TYPES[acc.name]}",
        f"-DHEAD_DIM={d}",
        f"-DVALUE_DIM={d_v}",
        f"-DTILE_ROWS={tile_rows(d, d_v, acc.itemsize)}",
    )


@functools.cache
def kernels(cupy, dtype: str, d: int, d_v: int):
    """The three kernels compiled for inputs of this dtype and head widths, the tile, and the
    accumulator's type."""
    acc = np.float64 if dtype == "float64" else np.float32
    module = cupy.RawModule(code=SOURCE, options=options(dtype, d, d_v))
    names = ("attention_forward", "attention_backward_dq", "attention_backward_dkdv")
    tile = tile_rows(d, d_v, np.dtype(acc).itemsize)
    return {name: module.get_function(name) for name in names}, tile, acc


_NULL = np.uint64(0)  # an absent bias, mask or dropout mask: a null pointer, which the kernels test


def _rows(a, lead: tuple):
    """a (..., T, H, w) as (B, T, H, w) (a view where possible) with a contiguous last axis,
    and its three element strides (batch, time, head)."""
    xp = xp_of(a)
    a = xp.broadcast_to(a, lead + a.shape[-3:]).reshape((math.prod(lead),) + a.shape[-3:])
    if a.shape[-1] > 1 and a.strides[-1] != a.itemsize:
        a = xp.ascontiguousarray(a)
    return a, tuple(np.int64(s // a.itemsize) for s in a.strides[:3])


def _scores(a, scores: tuple, dtype=None):
    """A bias, mask or dropout mask broadcast to the scores (..., H, T_q, T_k) as (B, H, T_q,
    T_k) and its four element strides (0 on broadcast axes); a null pointer for None."""
    if a is None:
        return _NULL, (np.int64(0),) * 4
    xp = xp_of(a)
    if dtype is not None:
        a = a.astype(dtype, copy=False)
    a = xp.broadcast_to(a, scores).reshape((math.prod(scores[:-3]),) + scores[-3:])
    return a, tuple(np.int64(s // a.itemsize) for s in a.strides)


def forward(ctx, q, k, v, *bias, scale, causal, mask, dropout_mask, window=None):
    """Y for every head (AttentionFn's forward), keeping on ``ctx`` what the backward reads."""
    xp = xp_of(q)
    lead, (T_q, H, d), (T_k, d_v) = q.shape[:-3], q.shape[-3:], (k.shape[-3], v.shape[-1])
    run, tile, acc = kernels(backend.cupy, q.dtype.name, d, v.shape[-1])
    k, v = k.astype(q.dtype, copy=False), v.astype(q.dtype, copy=False)
    (q_, qs), (k_, ks), (v_, vs) = _rows(q, lead), _rows(k, lead), _rows(v, lead)
    B, scores = q_.shape[0], lead + (H, T_q, T_k)
    b, bs = _scores(bias[0] if bias else None, scores, acc)
    m, ms = _scores(mask, scores)
    M, Ms = _scores(dropout_mask, scores, acc)
    Y = xp.empty(lead + (T_q, H, d_v), acc)  # (B, T_q, H, d_v) in memory
    out = Y if q.dtype == acc else xp.empty(Y.shape, q.dtype)  # rounded in the kernel
    stat_m, stat_inv_l = xp.empty((B, H, T_q), acc), xp.empty((B, H, T_q), acc)
    G = H // k.shape[-2]  # query heads per key/value head (grouped-query attention)
    shape = dict(T_q=np.int64(T_q), T_k=np.int64(T_k), H=np.int64(H), G=np.int64(G))
    shape.update(scale=acc(scale))
    shape.update(causal=np.int32(causal), window=np.int64(-1 if window is None else window))
    if B * H * T_q:
        grid = (B * H, math.ceil(T_q / tile))
        args = (q_, k_, v_, b, m, M, Y, out, stat_m, stat_inv_l, *shape.values())
        run["attention_forward"](grid, (tile,), (*args, *qs, *ks, *vs, *bs, *ms, *Ms))
    ctx.flash = dict(q=q_, k=k_, v=v_, strides=(qs, ks, vs), bias=(b, bs), mask=(m, ms))
    ctx.flash.update(drop=(M, Ms), Y=Y, m=stat_m, inv_l=stat_inv_l, shape=shape, lead=lead)
    return out


def backward(ctx, g):
    """dq, dk, dv in the inputs' type, and dB (None unless the bias needs a gradient; float32
    for half inputs)."""
    f = ctx.flash
    q, k, v, (qs, ks, vs), lead = f["q"], f["k"], f["v"], f["strides"], f["lead"]
    xp, (B, T_q, H, d), (T_k, d_v) = xp_of(q), q.shape, (k.shape[1], v.shape[-1])
    run, tile, acc = kernels(backend.cupy, q.dtype.name, d, d_v)
    g_, gs = _rows(g.data.astype(q.dtype, copy=False), lead)
    (b, bs), (m, ms), (M, Ms) = f["bias"], f["mask"], f["drop"]
    bias = ctx.inputs[3:]
    dB = xp.zeros(lead + (H, T_q, T_k), acc) if bias and bias[0].requires_grad else None
    delta = xp.empty((B, H, T_q), acc)
    # in the inputs' shapes and type, laid out as (B, T, H, ·): the engine stores them as is
    dq, dk, dv = (xp.empty(lead + a.shape[1:], q.dtype) for a in (q, k, v))
    strides = (*qs, *ks, *vs, *gs, *bs, *ms, *Ms)
    shape = f["shape"].values()
    if B * H * T_q:
        grid = (B * H, math.ceil(T_q / tile))
        args = (q, k, v, g_, b, m, M, f["Y"], f["m"], f["inv_l"], delta, dq, *shape)
        run["attention_backward_dq"](grid, (tile,), (*args, *strides))
    if B * H * T_k:  # a block per key/value head
        grid = (B * k.shape[2], math.ceil(T_k / tile))
        out = (dk, dv, _NULL if dB is None else dB)
        args = (q, k, v, g_, b, m, M, f["m"], f["inv_l"], delta, *out, *shape)
        run["attention_backward_dkdv"](grid, (tile,), (*args, *strides))
    return dq, dk, dv, dB
