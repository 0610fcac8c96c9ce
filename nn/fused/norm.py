"""Layer norm and RMS norm over the last axis, each as one node with a closed-form backward.

Notation (per row of d features): μ = mean(x), σ = √(mean((x - μ)²) + ε) for layer norm and
σ = √(mean(x²) + ε) for RMS norm; x̂ = (x - μ)/σ resp. x/σ; γ the gain, β the bias; g = dL/dy
and ĝ = g ⊙ γ the gradient arriving at x̂.
"""

from __future__ import annotations

from nn.fused._util import mean_last, recording, sum_rows
from tensorlab.backend import xp_of
from tensorlab.function import Function


class LayerNormFn(Function):
    """y = x̂ ⊙ γ + β with x̂ = (x - μ)/σ over the last axis (Ba et al. 2016).

    Backward (the mean and the variance both depend on every x_j of the row)::

        dx = (1/σ) (ĝ - mean(ĝ) - x̂ ⊙ mean(ĝ ⊙ x̂)),   dγ = Σ_rows g ⊙ x̂,   dβ = Σ_rows g.

    ``apply(x, γ, β, eps=...)``; γ and β may be left out (``apply(x, γ)``, ``apply(x)``).
    """

    def forward(ctx, x, *affine, eps):
        xp = xp_of(x)
        ctx.eps = eps
        xhat = x - mean_last(x)  # x - μ, scaled in place into x̂ below
        var = mean_last(xp.square(xhat))
        var += eps
        rstd = xp.divide(1.0, xp.sqrt(var, out=var), out=var)  # 1/σ
        xhat *= rstd
        ctx.xhat, ctx.rstd = xhat, rstd
        if not affine:
            return xhat
        y = xhat * affine[0]
        if len(affine) == 2:
            y += affine[1]
        return y

    def backward(ctx, g):
        x = ctx.inputs[0]
        gamma = ctx.inputs[1] if len(ctx.inputs) > 1 else None
        if recording():  # create_graph: recompute x̂, 1/σ from x in Tensor ops
            xc = x - x.mean(axis=-1, keepdims=True)
            rstd = ((xc * xc).mean(axis=-1, keepdims=True) + ctx.eps) ** -0.5
            xhat = xc * rstd
            gh = g * gamma if gamma is not None else g
            mean_gh = gh.mean(axis=-1, keepdims=True)
            dx = rstd * (gh - mean_gh - xhat * (gh * xhat).mean(axis=-1, keepdims=True))
            grads = (dx, g * xhat, g)  # the engine sums dγ, dβ over the leading axes
            return grads[: len(ctx.inputs)]
        g, xhat, rstd = g.data, ctx.xhat, ctx.rstd
        gh = g * gamma.data if gamma is not None else g
        dx = None
        if x.requires_grad:
            dx = gh - mean_last(gh)
            dx -= xhat * mean_last(gh * xhat)
            dx *= rstd
        grads = [dx]
        if gamma is not None:
            grads.append(sum_rows(g * xhat) if gamma.requires_grad else None)
        if len(ctx.inputs) == 3:
            grads.append(sum_rows(g) if ctx.inputs[2].requires_grad else None)
        return tuple(grads)


class RMSNormFn(Function):
    """y = x̂ ⊙ γ with x̂ = x/σ, σ = √(mean(x²) + ε) over the last axis (Zhang & Sennrich 2019).

    Backward (only the scale depends on the row; no centring)::

        dx = (1/σ) (ĝ - x̂ ⊙ mean(ĝ ⊙ x̂)),   dγ = Σ_rows g ⊙ x̂.

    ``apply(x, γ, eps=...)`` or ``apply(x, eps=...)``.
    """

    def forward(ctx, x, *gain, eps):
        xp = xp_of(x)
        ctx.eps = eps
        var = mean_last(xp.square(x))
        var += eps
        rstd = xp.divide(1.0, xp.sqrt(var, out=var), out=var)  # 1/σ
        xhat = x * rstd
        ctx.xhat, ctx.rstd = xhat, rstd
        return xhat * gain[0] if gain else xhat

    def backward(ctx, g):
        x = ctx.inputs[0]
        gamma = ctx.inputs[1] if len(ctx.inputs) > 1 else None
        if recording():
            rstd = ((x * x).mean(axis=-1, keepdims=True) + ctx.eps) ** -0.5
            xhat = x * rstd
            gh = g * gamma if gamma is not None else g
            dx = rstd * (gh - xhat * (gh * xhat).mean(axis=-1, keepdims=True))
            return (dx, g * xhat)[: len(ctx.inputs)]
        g, xhat, rstd = g.data, ctx.xhat, ctx.rstd
        gh = g * gamma.data if gamma is not None else g
        dx = None
        if x.requires_grad:
            dx = gh - xhat * mean_last(gh * xhat)
            dx *= rstd
        if gamma is None:
            return dx
        return dx, (sum_rows(g * xhat) if gamma.requires_grad else None)
