"""Small helpers shared by the fused ops."""

from __future__ import annotations

from tensorlab import function as _function
from tensorlab.backend import xp_of
from tensorlab.tensor import Tensor

const = Tensor._wrap  # a constant Tensor around an array (no graph, no checks)


def recording() -> bool:
    """True inside a backward run with ``create_graph=True`` (and in ordinary forward code):
    then a backward must be written in Tensor ops so that it records a graph."""
    return _function.modes.grad_enabled


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
