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
For them, with head widths that are multiples of 16, the products run on the tensor cores
(the ``_mma`` kernels, :func:`mma_tiles`); elsewhere a thread per row on the CUDA cores.

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


MMA_WARPS = 4  # warps a block of the tensor-core forward, 16 query rows each (WARPS in the .cu)


def mma_tiles(dtype: str, d: int, d_v: int) -> tuple[int, int] | None:
    """The tiles of the tensor-core kernels (``*_mma``): keys a tile of the forward, and rows
    of the other side a tile of the backward, each 64, 32 or 16, the most whose block fits in
    shared memory (64 rows of the block's own side and a tile of the other, q's and k's rows
    padded by 8 values, v's and g's too, and the backward's three numbers a query); None where
    they do not apply: float32 and float64 inputs, head widths that are not multiples of 16,
    or widths too large for a tile of 16 (the CUDA-core kernels run then)."""
    if dtype not in ("float16", "bfloat16") or d % 16 or d_v % 16:
        return None
    rows = 16 * MMA_WARPS
    fits = lambda tile, own: own + tile * ((d + 8) * 2 + (d_v + 8) * 2 + 12) <= SHARED_BYTES  # noqa: E731
    forward = [t for t in (64, 32, 16) if fits(t, rows * (d + 8) * 2)]
    backward = [t for t in (64, 32, 16) if fits(t, rows * (d + 8 + d_v + 8) * 2)]
    return (forward[0], backward[0]) if forward and backward else None


def options(dtype: str, d: int, d_v: int) -> tuple[str, ...]:
    """The -D options that compile the module for inputs of ``dtype`` and these head widths
    (at least 1: CUDA has no arrays of size 0, so heads of width 0 get a column of zeros)."""
    if d < 1 or d_v < 1:
        raise ValueError(f"flash attention: heads of width {d} and {d_v}; the kernels need ≥ 1")
    acc = np.dtype(np.float64 if dtype == "float64" else np.float32)
    tiles, mma = mma_tiles(dtype, d, d_v), ()
    if tiles is not None:
        mma = ("-DTENSOR_CORES=1", f"-DMMA_KEYS={tiles[0]}", f"-DMMA_BACKWARD_TILE={tiles[1]}")
        mma += (f"-DMMA_BF16={int(dtype == 'bfloat16')}",)
    return (
        f"-DELEMENT={_C_TYPES[dtype]}",
        f"-DACCUMULATOR={_C_TYPES[acc.name]}",
        f"-DHEAD_DIM={d}",
        f"-DVALUE_DIM={d_v}",
        f"-DTILE_ROWS={tile_rows(d, d_v, acc.itemsize)}",
        *mma,
    )


@functools.cache
def kernels(cupy, dtype: str, d: int, d_v: int) -> dict:
    """The kernels compiled for inputs of this dtype and head widths: ``forward``, ``dq`` and
    ``dkdv``, ``rows`` (rows of a block's own side: queries, or keys for ``dkdv``), ``threads``
    (a block's) and ``acc`` (the type of the sums). Chosen here, once: the tensor-core kernels
    where :func:`mma_tiles` allows them, the CUDA-core ones elsewhere."""
    acc = np.float64 if dtype == "float64" else np.float32
    module = cupy.RawModule(code=SOURCE, options=options(dtype, d, d_v))
    if mma_tiles(dtype, d, d_v) is not None:
        names, rows, threads = ("_mma",) * 3, 16 * MMA_WARPS, 32 * MMA_WARPS
    else:
        names, rows = ("",) * 3, tile_rows(d, d_v, np.dtype(acc).itemsize)
        threads = rows
    kinds = ("attention_forward", "attention_backward_dq", "attention_backward_dkdv")
    forward, dq, dkdv = (module.get_function(kind + end) for kind, end in zip(kinds, names))
    return dict(forward=forward, dq=dq, dkdv=dkdv, rows=rows, threads=threads, acc=acc)


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


def _some_width(a):
    """a, or for heads of width 0 one column of zeros (no kernel has arrays of size 0; zero
    columns add nothing to q · k and make zero outputs and gradients, cut off afterwards)."""
    return a if a.shape[-1] else xp_of(a).zeros(a.shape[:-1] + (1,), a.dtype)


def forward(ctx, q, k, v, *bias, scale, causal, mask, dropout_mask, window=None):
    """Y for every head (AttentionFn's forward), keeping on ``ctx`` what the backward reads."""
    xp, widths = xp_of(q), (q.shape[-1], v.shape[-1])
    q, k, v = _some_width(q), _some_width(k), _some_width(v)
    lead, (T_q, H, d), (T_k, d_v) = q.shape[:-3], q.shape[-3:], (k.shape[-3], v.shape[-1])
    run = kernels(backend.cupy, q.dtype.name, d, v.shape[-1])
    acc = run["acc"]
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
        grid = (B * H, math.ceil(T_q / run["rows"]))
        args = (q_, k_, v_, b, m, M, Y, out, stat_m, stat_inv_l, *shape.values())
        run["forward"](grid, (run["threads"],), (*args, *qs, *ks, *vs, *bs, *ms, *Ms))
    ctx.flash = dict(q=q_, k=k_, v=v_, strides=(qs, ks, vs), bias=(b, bs), mask=(m, ms))
    ctx.flash.update(drop=(M, Ms), Y=Y, m=stat_m, inv_l=stat_inv_l, shape=shape, lead=lead)
    ctx.flash.update(widths=widths)
    return out if widths[1] else out[..., :0]


def backward(ctx, g):
    """dq, dk, dv in the inputs' type, and dB (None unless the bias needs a gradient; float32
    for half inputs)."""
    f = ctx.flash
    q, k, v, (qs, ks, vs), lead = f["q"], f["k"], f["v"], f["strides"], f["lead"]
    xp, (B, T_q, H, d), (T_k, d_v) = xp_of(q), q.shape, (k.shape[1], v.shape[-1])
    run = kernels(backend.cupy, q.dtype.name, d, d_v)
    rows, threads, acc = run["rows"], run["threads"], run["acc"]
    g_, gs = _rows(_some_width(g.data.astype(q.dtype, copy=False)), lead)
    (b, bs), (m, ms), (M, Ms) = f["bias"], f["mask"], f["drop"]
    bias = ctx.inputs[3:]
    dB = xp.zeros(lead + (H, T_q, T_k), acc) if bias and bias[0].requires_grad else None
    delta = xp.empty((B, H, T_q), acc)
    # in the inputs' shapes and type, laid out as (B, T, H, ·): the engine stores them as is
    dq, dk, dv = (xp.empty(lead + a.shape[1:], q.dtype) for a in (q, k, v))
    strides = (*qs, *ks, *vs, *gs, *bs, *ms, *Ms)
    shape = f["shape"].values()
    if B * H * T_q:
        grid = (B * H, math.ceil(T_q / rows))
        args = (q, k, v, g_, b, m, M, f["Y"], f["m"], f["inv_l"], delta, dq, *shape)
        run["dq"](grid, (threads,), (*args, *strides))
    if B * H * T_k:  # a block per key/value head
        grid = (B * k.shape[2], math.ceil(T_k / rows))
        out = (dk, dv, _NULL if dB is None else dB)
        args = (q, k, v, g_, b, m, M, f["m"], f["inv_l"], delta, *out, *shape)
        run["dkdv"](grid, (threads,), (*args, *strides))
    d, d_v = f["widths"]
    if not d * d_v:  # (slices only then: the engine copies a view before storing it)
        dq, dk, dv = dq[..., :d], dk[..., :d], dv[..., :d_v]
    return dq, dk, dv, dB
