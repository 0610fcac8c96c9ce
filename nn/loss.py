"""Losses: softmax cross-entropy (one node, log-softmax and negative log-likelihood fused) and
mean squared error."""

from __future__ import annotations

import numpy as np

import tensorlab as tl
from tensorlab import Tensor
from tensorlab.backend import acc_dtype, min_max, xp_of
from tensorlab.function import Function
from tensorlab.ops.nnops import shifted_exp


class CrossEntropyFn(Function):
    """Cross-entropy of logits z (N, C) against class indices t (N,), with label smoothing ε
    and an ignored index. With p = softmax(z) and the target distribution
    q = (1 - ε) onehot(t) + ε/C, the loss of row n is

        ℓₙ = -Σ_c q_c log p_c = logsumexp(zₙ) - (1 - ε) z_{n,t} - ε mean_c z_{n,c},

    and 0 for rows whose target is ``ignore_index``. ``reduction`` "mean" divides the sum by
    the number M of rows not ignored (as PyTorch does), "sum" sums, "none" returns ℓ.

    Backward (softmax and log cancel into a difference of distributions)::

        dz_n = wₙ (pₙ - qₙ),   wₙ = g/M ("mean"), g ("sum"), gₙ ("none"); 0 for ignored rows.

    The forward keeps p unnormalized, E = exp(z - m) with m the row maxima, and its row sums
    s (p = E/s; logsumexp(z) = m + log s): the (N, C) array is written once forward and once
    backward (p w = E (w/s)).

    Leading axes (B, T, C) with targets (B, T) are flattened to rows. float16 and bfloat16
    logits are taken in float32 and the loss is float32 (a loss scaled for float16 training
    must not overflow float16's 65504); their gradient returns in their own dtype.
    """

    def forward(ctx, logits, targets, ignore_index, label_smoothing, reduction):
        xp = xp_of(logits)
        C = logits.shape[-1]
        z = logits.reshape(-1, C)
        if acc_dtype(z):
            z = z.astype(acc_dtype(z))
        t = targets.reshape(-1)
        valid = t != ignore_index
        tt = xp.where(valid, t, 0)
        rows = xp.arange(z.shape[0])
        m = z.max(axis=1, keepdims=True)  # every logit is shifted by its row's maximum
        E = shifted_exp(z, m)  # (N, C); p = E / s, never divided out
        s = E.sum(axis=1, keepdims=True)
        lse = xp.log(s[:, 0])  # logsumexp(z) - m
        loss = lse - (1.0 - label_smoothing) * (z[rows, tt] - m[:, 0])
        if label_smoothing:
            loss -= label_smoothing * (z.mean(axis=1) - m[:, 0])
        loss *= valid
        ctx.E, ctx.s, ctx.valid, ctx.tt, ctx.rows = E, s, valid, tt, rows
        ctx.eps, ctx.reduction = label_smoothing, reduction
        # M stays on the device (reading it would make the host wait for the forward)
        ctx.count = xp.maximum(valid.sum(), 1).astype(loss.dtype) if reduction == "mean" else 1
        if reduction == "none":
            return loss.reshape(targets.shape)
        total = loss.sum()
        return total / ctx.count if reduction == "mean" else total

    def backward(ctx, g):
        C = ctx.inputs[0].shape[-1]
        eps, valid, tt, rows = ctx.eps, ctx.valid, ctx.tt, ctx.rows
        w = g.data.reshape(-1) if ctx.reduction == "none" else g.data / ctx.count
        w = (w * valid).astype(ctx.E.dtype, copy=False)[:, None]
        dz = ctx.E * (w / ctx.s)  # p w
        dz[rows, tt] -= (1.0 - eps) * w[:, 0]
        if eps:
            dz -= (eps / C) * w
        return dz.reshape(ctx.inputs[0].shape)

    @staticmethod
    def composed(logits, targets, ignore_index, label_smoothing, reduction):
        C = logits.shape[-1]
        logp = logits.reshape(-1, C).log_softmax(axis=-1)
        t = targets.reshape(-1)
        valid = t != ignore_index
        tt = xp_of(t).where(valid, t, 0)
        loss = -logp[xp_of(t).arange(t.shape[0]), tt] * (1.0 - label_smoothing)
        if label_smoothing:
            loss = loss - logp.mean(axis=-1) * label_smoothing
        loss = tl.where(valid, loss, 0.0)
        if reduction == "none":
            return loss.reshape(targets.shape)
        total = loss.sum()
        return total / max(int(valid.sum()), 1) if reduction == "mean" else total


def cross_entropy(
    logits: Tensor,
    targets,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> Tensor:
    """Softmax cross-entropy of logits (N, C) or (B, T, C) against integer targets (N,) or
    (B, T). Targets equal to ``ignore_index`` contribute nothing (and "mean" averages over the
    others); ``label_smoothing`` ε mixes the one-hot target with the uniform distribution,
    q = (1 - ε) onehot + ε/C. ``reduction``: "mean", "sum" or "none" (per-target losses)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be mean, sum or none, not {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:  # (a NaN fails this too)
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], not {label_smoothing}")
    t = targets.data if isinstance(targets, Tensor) else xp_of(logits.data).asarray(targets)
    if t.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: targets must be integer class indices, not {t.dtype}")
    if t.shape != logits.shape[:-1]:
        raise ValueError(
            f"cross_entropy: logits of shape {logits.shape} need targets of shape "
            f"{logits.shape[:-1]}, got {t.shape}"
        )
    C = logits.shape[-1]
    lo, hi = min_max(t)
    if lo < 0 or hi >= C:
        bad = t[(t != ignore_index) & ((t < 0) | (t >= C))]
        if bad.size:
            raise ValueError(
                f"cross_entropy: target {int(bad.reshape(-1)[0])} is not a class of the "
                f"logits (0..{C - 1}) nor ignore_index={ignore_index}"
            )
    return CrossEntropyFn.apply(
        logits,
        targets=t,
        ignore_index=ignore_index,
        label_smoothing=float(label_smoothing),
        reduction=reduction,
    )


def mse_loss(input: Tensor, target, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Mean (or summed, or per-entry) squared error (input - target)², for a target of the
    input's shape or a single number. Other shapes are refused: a (N, 1) input and an (N,)
    target would broadcast to (N, N) pairs, a wrong loss without an error (PyTorch warns)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"mse_loss: reduction must be mean, sum or none, not {reduction!r}")
    shape = np.shape(target)  # (a Tensor's .shape, or that of a number or list)
    if shape not in ((), input.shape):
        raise ValueError(
            f"mse_loss: the target of shape {tuple(shape)} is not the input's shape "
            f"{input.shape} (nor a single number)"
        )
    diff = input - target
    sq = diff * diff
    if reduction == "mean":
        return sq.mean()
    if reduction == "sum":
        return sq.sum()
    return sq
