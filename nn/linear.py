"""The affine map y = x W + b: its op, its function ``linear`` and its layer ``Linear``."""

from __future__ import annotations

import math
from functools import partial

from nn.checks import check_count
from nn.init import constant, uniform
from nn.module import Module
from tensorlab import Tensor, autocast_array, autocast_inputs, matmul_grads
from tensorlab.backend import DEFAULT_DTYPE, matmul, xp_of
from tensorlab.function import Function, modes
from tensorlab.fused import array_math


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

    Inside ``tl.autocast(h)`` (``dtype=h``) the op rounds x and W to h itself (the rule of
    :func:`tensorlab.autocast_array`): y is in h, its products summed in float32, and b is
    added to it in b's own precision; the backward multiplies by the rounded x and W and
    returns dx, dW and db straight in the dtypes of x, W and b (float32 for float32 ones,
    unrounded), so no cast node sits on either side of the product.

    ``apply(x, W)`` or ``apply(x, W, b)``, with the parameters ``in_dims`` (default 1) and
    ``dtype`` (tl.autocast's, or None).
    """

    def forward(ctx, x, W, *b, in_dims=1, dtype=None):
        if dtype is not None:
            x, W = autocast_array(x, dtype), autocast_array(W, dtype)
            ctx.operands = x, W  # (what the backward multiplies by)
        x2, W2 = _as_matrices(x, W, in_dims)
        y = matmul(x2, W2)  # float16/bfloat16: products summed in float32 (backend.matmul)
        if b:
            y += b[0]
        return y.reshape(x.shape[: x.ndim - in_dims] + W.shape[in_dims:])

    def backward(ctx, g):
        x, W = ctx.inputs[0], ctx.inputs[1]
        xa, Wa = ctx.operands if ctx.params.get("dtype") else (x.data, W.data)
        x2, W2 = _as_matrices(xa, Wa, ctx.params.get("in_dims", 1))
        g2 = g.data.reshape(x2.shape[0], W2.shape[1])
        # dx and dW written straight into arrays of x's and W's shapes and dtypes (float32 sums
        # of half products unrounded; a reshaped result would be a view, which the engine
        # copies before keeping it as a .grad)
        xp = xp_of(g2)
        gx = xp.empty(xa.shape, x.dtype) if x.requires_grad else None
        gW = xp.empty(Wa.shape, W.dtype) if W.requires_grad else None
        products = [
            partial(matmul, out=None if out is None else out.reshape(shape))
            for out, shape in ((gx, x2.shape), (gW, W2.shape))
        ]
        matmul_grads(x2, W2, g2, x.requires_grad, W.requires_grad, products)
        need_b = len(ctx.inputs) == 3 and ctx.inputs[2].requires_grad
        # Σ_rows g: 1ᵀ g, a gemv, summed in (at least) float32 and returned in b's dtype
        gb = array_math(g2).sum(g2, axis=0, dtype=ctx.inputs[2].dtype) if need_b else None
        return gx, gW, gb

    @staticmethod
    def composed(x, W, *b, in_dims=1, dtype=None):
        if dtype is not None:
            x, W = autocast_inputs(x, W, dtype=dtype)
        x2, W2 = _as_matrices(x, W, in_dims)
        y = x2 @ W2
        if b:
            y = (y + b[0]).astype(y.dtype)
        return y.reshape(x.shape[: x.ndim - in_dims] + W.shape[in_dims:])


def linear(x: Tensor, W: Tensor, b: Tensor | None = None, in_dims: int = 1) -> Tensor:
    """y = x W + b for x (..., d_in), W (d_in, d_out), b (d_out,) or None; with ``in_dims``
    = k, x's last k axes meet W's first k (see :class:`LinearFn`; inside ``tl.autocast`` the
    op rounds x and W itself)."""
    xs, ws = x.data.shape, W.data.shape
    if xs[len(xs) - in_dims :] != ws[:in_dims]:
        raise ValueError(
            f"linear: x of shape {x.shape} does not fit W of shape {W.shape} (x's last "
            f"{in_dims} axes must be W's first {in_dims})"
        )
    args = (x, W) if b is None else (x, W, b)
    return LinearFn.apply(*args, in_dims=in_dims, dtype=modes.autocast)


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
