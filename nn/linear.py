"""The affine map y = x W + b: its op, its function ``linear`` and its layer ``Linear``."""

from __future__ import annotations

import math

from nn.checks import check_count
from nn.init import constant, uniform
from nn.module import Module
from tensorlab import Tensor, autocast_inputs, matmul_grads
from tensorlab.backend import DEFAULT_DTYPE, matmul
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
        gx, gW = matmul_grads(x2, W2, g2, x.requires_grad, W.requires_grad, product=matmul)
        gx = None if gx is None else gx.reshape(xa.shape)
        if gW is not None and gW.shape != Wa.shape:  # (a reshaped 2-D gW would be a view, copied)
            gW = gW.reshape(Wa.shape)
        need_b = len(ctx.inputs) == 3 and ctx.inputs[2].requires_grad
        gb = array_math(g2).sum(g2, axis=0) if need_b else None  # Σ_rows g: 1ᵀ g, a gemv
        return gx, gW, gb

    @staticmethod
    def composed(x, W, *b, in_dims=1):
        x2, W2 = _as_matrices(x, W, in_dims)
        y = x2 @ W2
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
