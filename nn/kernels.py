"""Array kernels the fused ops share: row sums as BLAS products, and cache-sized row blocks.

A fused op (``LayerNormFn``, ``AttentionFn``, ...) is one graph node whose forward and
first-order backward run on raw arrays; these are the few array tricks that make them fast.
"""

from __future__ import annotations

from tensorlab.backend import xp_of


# Reductions as matrix-vector products. NumPy's ufunc reductions pay a fixed cost per row when
# the reduced axis is short and contiguous (rows of 64-512 numbers, as in every fused op here),
# while BLAS gemv streams through the whole array at memory speed: on the GPT benchmark shapes
# the product is 3-6x faster (benchmarks/bench_kernels.py). Both sum in float32 for float32
# input; rows this short lose nothing that matters.
def sum_last(a):
    """Σ over the last axis, kept as an axis of length 1: a·1 (one gemv on the (rows, d) view)."""
    d = a.shape[-1]
    ones = xp_of(a).ones(d, dtype=a.dtype)
    return (a.reshape(-1, d) @ ones).reshape(a.shape[:-1] + (1,))


def mean_last(a):
    """Mean over the last axis, kept as an axis of length 1 (see :func:`sum_last`)."""
    d = a.shape[-1]
    w = xp_of(a).full(d, 1.0 / d, dtype=a.dtype)
    return (a.reshape(-1, d) @ w).reshape(a.shape[:-1] + (1,))


def sum_rows(a):
    """Σ over every axis but the last, shape (d,): 1ᵀ a on the (rows, d) view (a gemv)."""
    a2 = a.reshape(-1, a.shape[-1])
    return xp_of(a).ones(a2.shape[0], dtype=a.dtype) @ a2


# Long chains of elementwise passes (exact GELU makes about 20) over an array larger than the
# CPU's caches run at memory speed: every pass streams the whole array in and out again. Done
# one block of rows at a time, the block and its temporaries stay in cache between passes. On
# the 6-layer, 384-wide benchmark GELU's input is 1.6M numbers (6 MiB); in blocks of 2^18
# numbers its forward took 6.3-7.3 ms instead of 12.5 ms. Arrays of at most one block (all of
# the nanoGPT CPU config's) are done in one piece, as before.
BLOCK = 1 << 18  # numbers per block: 1 MiB of float32, so a few temporaries fit in cache


def row_blocks(a) -> list[slice]:
    """Slices of ``a``'s first axis that cut it into blocks of about :data:`BLOCK` numbers (one
    slice for an array of at most a block). For an (N, d) array each block is whole rows."""
    if a.ndim == 0 or a.size <= BLOCK:
        return [slice(None)]
    step = max(1, BLOCK // (a.size // a.shape[0]))
    return [slice(i, i + step) for i in range(0, a.shape[0], step)]
