"""Softmax cross-entropy as one node: log-softmax and negative log-likelihood fused."""

from __future__ import annotations

from nn.fused._util import const, recording
from tensorlab.backend import xp_of
from tensorlab.function import Function


class CrossEntropy(Function):
    """Cross-entropy of logits z (N, C) against class indices t (N,), with label smoothing ε
    and an ignored index. With p = softmax(z) and the target distribution
    q = (1 - ε) onehot(t) + ε/C, the loss of row n is

        ℓₙ = -Σ_c q_c log p_c = logsumexp(zₙ) - (1 - ε) z_{n,t} - ε mean_c z_{n,c},

    and 0 for rows whose target is ``ignore_index``. ``reduction`` "mean" divides the sum by
    the number M of rows not ignored (as PyTorch does), "sum" sums, "none" returns ℓ.

    Backward (softmax and log cancel into a difference of distributions)::

        dz_n = wₙ (pₙ - qₙ),   wₙ = g/M ("mean"), g ("sum"), gₙ ("none"); 0 for ignored rows.

    Leading axes (B, T, C) with targets (B, T) are flattened to rows.
    """

    def forward(ctx, logits, targets, ignore_index, label_smoothing, reduction):
        xp = xp_of(logits)
        C = logits.shape[-1]
        z = logits.reshape(-1, C)
        t = targets.reshape(-1)
        valid = t != ignore_index
        tt = xp.where(valid, t, 0)
        rows = xp.arange(z.shape[0])
        p = z - z.max(axis=1, keepdims=True)  # shifted logits, then in place: exp, softmax
        z_t = p[rows, tt]
        mean_z = p.mean(axis=1) if label_smoothing else None
        xp.exp(p, out=p)
        s = p.sum(axis=1, keepdims=True)
        p /= s
        lse = xp.log(s[:, 0])
        loss = lse - (1.0 - label_smoothing) * z_t
        if label_smoothing:
            loss -= label_smoothing * mean_z
        loss *= valid
        ctx.p, ctx.valid, ctx.tt, ctx.rows = p, valid, tt, rows
        ctx.eps, ctx.reduction = label_smoothing, reduction
        ctx.count = max(int(valid.sum()), 1) if reduction == "mean" else 1
        if reduction == "none":
            return loss.reshape(targets.shape)
        total = loss.sum()
        return total / ctx.count if reduction == "mean" else total

    def backward(ctx, g):
        logits = ctx.inputs[0]
        C = logits.shape[-1]
        eps, valid, tt, rows = ctx.eps, ctx.valid, ctx.tt, ctx.rows
        xp = xp_of(valid)
        if recording():  # create_graph: p recomputed in Tensor ops, so dz is differentiable
            q = xp.zeros((tt.shape[0], C), dtype=logits.dtype)
            q[rows, tt] = 1.0 - eps
            q += eps / C
            w = g.reshape(-1, 1) if ctx.reduction == "none" else g / ctx.count
            w = w * const(valid.astype(logits.dtype)[:, None])
            p = logits.reshape(-1, C).softmax(axis=-1)
            return ((p - const(q)) * w).reshape(logits.shape)
        w = g.data.reshape(-1) if ctx.reduction == "none" else g.data / ctx.count
        w = (w * valid).astype(logits.dtype, copy=False)[:, None]
        dz = ctx.p * w
        dz[rows, tt] -= (1.0 - eps) * w[:, 0]
        if eps:
            dz -= (eps / C) * w
        return dz.reshape(logits.shape)
