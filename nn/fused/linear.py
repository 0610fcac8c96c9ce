"""Affine map y = x W + b as one node (instead of MatMul, Add and a broadcast SumTo)."""

from __future__ import annotations

from nn.fused._util import recording, sum_rows
from tensorlab.function import Function


class LinearFn(Function):
    """y = x W + b, with x (..., d_in), W (d_in, d_out), b (d_out,) optional.

    Leading axes of x are folded into rows, so every product is one 2-D GEMM::

        dx = g Wᵀ,    dW = xᵀ g  (rows summed over all leading axes),    db = Σ_rows g.

    ``apply(x, W)`` or ``apply(x, W, b)``.
    """

    def forward(ctx, x, W, *b):
        d_in, d_out = W.shape
        y = x.reshape(-1, d_in) @ W
        if b:
            y += b[0]
        return y.reshape(x.shape[:-1] + (d_out,))

    def backward(ctx, g):
        x, W = ctx.inputs[0], ctx.inputs[1]
        d_in, d_out = W.shape
        need_b = len(ctx.inputs) == 3 and ctx.inputs[2].requires_grad
        if recording():  # create_graph: the same products, in Tensor ops
            g2 = g.reshape(-1, d_out)
            gx = g @ W.mT if x.requires_grad else None
            gW = x.reshape(-1, d_in).mT @ g2 if W.requires_grad else None
            gb = g2.sum(axis=0) if need_b else None
            return gx, gW, gb
        g2 = g.data.reshape(-1, d_out)
        gx = (g2 @ W.data.T).reshape(x.shape) if x.requires_grad else None
        gW = x.data.reshape(-1, d_in).T @ g2 if W.requires_grad else None
        gb = sum_rows(g2) if need_b else None
        return gx, gW, gb
