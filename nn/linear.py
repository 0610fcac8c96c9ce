"""The affine map y = x W + b: its op, its function ``linear`` and its layer ``Linear``; and
sums over rows or over the last axis, written as the matrix-vector products they are (the
fused ops of ``nn`` take their reductions from here)."""

from __future__ import annotations

import math

import numpy as np

from nn.checks import check_count
from nn.init import constant, uniform
from nn.module import Module
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE, matmul, xp_of
from tensorlab.function import Function, modes
from tensorlab.ops.linalg import autocast_inputs

# Reductions as matrix-vector products. NumPy's ufunc reductions pay a fixed cost per row when
# the reduced axis is short and contiguous (rows of 64-512 numbers, as in every fused op here),
# while BLAS gemv streams through the whole array at memory speed, so the product is faster on
# the GPT benchmark shapes (benchmarks/bench_kernels.py prints both). Both sum in float32 for
# float32 input; rows this short lose nothing that matters. float16 and bfloat16 sum in float32
# (backend.matmul), and the result is cast back to the input's dtype.
_constant_vectors: dict = {}


def _filled(a, n: int, value: float):
    """A vector of ``n`` copies of ``value`` in ``a``'s dtype and array module, made once and
    then reused (the products below only read it)."""
    key = (type(a), a.dtype, n, value)
    v = _constant_vectors.get(key)
    if v is None:
        v = _constant_vectors[key] = xp_of(a).full(n, value, dtype=a.dtype)
    return v


def _rows(a):
    """The (rows, d) view of ``a``: every axis but the last folded (also when d = 0)."""
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


def sum_last(a):
    """Σ over the last axis, kept as an axis of length 1: a·1 (one gemv on the (rows, d) view)."""
    d = a.shape[-1]
    return matmul(_rows(a), _filled(a, d, 1.0)).reshape(a.shape[:-1] + (1,))


def mean_last(a):
    """Mean over the last axis, kept as an axis of length 1: a·(1/d) (see :func:`sum_last`)."""
    d = a.shape[-1]
    return matmul(_rows(a), _filled(a, d, 1.0 / d)).reshape(a.shape[:-1] + (1,))


def sum_rows(a):
    """Σ over every axis but the last, shape (d,): 1ᵀ a on the (rows, d) view (a gemv). It is
    the gradient of a bias (``LinearFn``'s db, and layer norm's dβ)."""
    a2 = _rows(a)
    return matmul(_filled(a, a2.shape[0], 1.0), a2)


def _as_matrices(x, W, in_dims: int):
    """x as (rows, d_in) and W as (d_in, d_out), the sizes spelled out (with a size of 0 in
    them, -1 could be any size)."""
    lead = x.shape[: x.ndim - in_dims]
    d_in, d_out = math.prod(W.shape[:in_dims]), math.prod(W.shape[in_dims:])
    return x.reshape(math.prod(lead), d_in), W.reshape(d_in, d_out)


class LinearFn(Function):
    """y = x W + b, with x (..., d_in), W (d_in, d_out), b (d_out,) optional, as one node
    (instead of MatMul, Add and a broadcast SumTo).

    Leading axes of x are folded into rows, so every product is one 2-D GEMM::

        dx = g Wᵀ,    dW = xᵀ g  (rows summed over all leading axes),    db = Σ_rows g.

    The same map between axes that are tensors themselves: with ``in_dims = k``, the last k
    axes of x are the input and the first k axes of W match them; W's other axes are the
    output's (attention's W_q (d_model, H, d_head) gives every head's queries (..., H,
    d_head), and W_O (H, d_head, d_model) sums over heads and d_head). It is the same GEMM on
    the flattened views, and b is 1-D over the flattened output.

    ``apply(x, W)`` or ``apply(x, W, b)``, with the parameter ``in_dims`` (default 1).
    """

    def forward(ctx, x, W, *b, in_dims=1):
        x2, W2 = _as_matrices(x, W, in_dims)
        y = matmul(x2, W2)  # float16/bfloat16: products summed in float32 (backend.matmul)
        if b:
            y += b[0]
        return y.reshape(x.shape[: x.ndim - in_dims] + W.shape[in_dims:])

    def backward(ctx, g):
        x, W = ctx.inputs[0], ctx.inputs[1]
        xa, Wa = x.data, W.data
        x2, W2 = _as_matrices(xa, Wa, ctx.params.get("in_dims", 1))
        g2 = g.data.reshape(x2.shape[0], W2.shape[1])
        gx = matmul(g2, W2.T).reshape(xa.shape) if x.requires_grad else None
        gW = None
        if W.requires_grad:  # written in W's shape (the engine would copy a view it stores)
            gW = xp_of(Wa).empty(Wa.shape, np.promote_types(x2.dtype, g2.dtype))
            matmul(x2.T, g2, out=gW.reshape(W2.shape))
        gb = sum_rows(g2) if len(ctx.inputs) == 3 and ctx.inputs[2].requires_grad else None
        return gx, gW, gb

    @staticmethod
    def composed(x, W, *b, in_dims=1):
        d_in, d_out = math.prod(W.shape[:in_dims]), math.prod(W.shape[in_dims:])
        y = x.reshape(x.shape[: x.ndim - in_dims] + (d_in,)) @ W.reshape(d_in, d_out)
        if b:
            y = y + b[0]
        return y.reshape(x.shape[: x.ndim - in_dims] + W.shape[in_dims:])


def linear(x: Tensor, W: Tensor, b: Tensor | None = None, in_dims: int = 1) -> Tensor:
    """y = x W + b for x (..., d_in), W (d_in, d_out), b (d_out,) or None; with ``in_dims``
    = k, x's last k axes meet W's first k (see :class:`LinearFn`)."""
    xs, ws = x.data.shape, W.data.shape
    if xs[len(xs) - in_dims :] != ws[:in_dims]:
        raise ValueError(
            f"linear: x of shape {x.shape} does not fit W of shape {W.shape} (x's last "
            f"{in_dims} axes must be W's first {in_dims})"
        )
    if modes.autocast is not None:  # inside tl.autocast: the product in its dtype
        x, W, b = autocast_inputs(x, W, b)
    args = (x, W) if b is None else (x, W, b)
    return LinearFn.apply(*args, in_dims=in_dims)


class Linear(Module):
    """y = x W + b, acting on the last axis of x.

    Parameters: ``W`` (d_in, d_out), the row-vector convention of the circuits notation
    (x W_Q); ``b`` (d_out,), or None with ``bias=False``. W starts as U(-1/√d_in, 1/√d_in)
    (PyTorch's default scale), b as zeros.
    """

    def __init__(
        self,
        d_in: int,
        d_out: int,
        bias: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        super().__init__()
        check_count("Linear", d_in=d_in, d_out=d_out)
        self.d_in, self.d_out = d_in, d_out
        self.W = uniform((d_in, d_out), 1.0 / math.sqrt(d_in), dtype, device)
        self.b = constant((d_out,), 0.0, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.W, self.b)

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_out={self.d_out}, bias={self.b is not None}"
