"""Losses: softmax cross-entropy (one node, log-softmax and negative log-likelihood fused) and
mean squared error."""

from __future__ import annotations

import numpy as np

import tensorlab as tl
from tensorlab import Tensor
from tensorlab.backend import host_ints, xp_of
from tensorlab.fused_op import FusedFunction


class CrossEntropyFn(FusedFunction):
    """Cross-entropy of each row of logits z (..., C) against its class index t (...), with
    label smoothing ε and an ignored index. With p = softmax(z) and the target distribution
    q = (1 - ε) onehot(t) + ε/C, the loss of a row is

        ℓ = -Σ_c q_c log p_c = logsumexp(z) - (1 - ε) z_t - ε mean_c z_c,

    and 0 for rows whose target is ``ignore_index``. Backward (softmax and log cancel into a
    difference of distributions)::

        dz = g (p - q),   0 for ignored rows.

    One loss per row; ℓ and dz are both multiplied by ``scale`` (a number, 1 by default).
    With ``summed=True`` the node returns Σ ℓ over the rows, one number: :func:`cross_entropy`
    averages by passing scale = 1/M, M the rows not ignored, so a mean or a sum is this one
    node, as PyTorch's ``nll_loss`` takes its reduction (with a separate sum, a second node in
    every training step's graph, forward + backward over (768, 65) logits took 134 µs on this
    project's 2-core machine; 106 so). Its g is then one number, which the backward formula
    broadcasts over the rows. float16 and bfloat16 logits are taken in float32 and the loss
    stays float32 (a loss scaled for float16 training must not overflow float16's 65504);
    their gradient returns in their own dtype. logsumexp is taken after shifting by the row's
    maximum m, so nothing overflows. The softmax is kept unnormalized: the forward saves
    e = exp(z - m) and its row sums s (p = e/s), and z_t and the backward's - (1 - ε) at the
    target are a gather and a scatter of one number per row.
    """

    rows, saves = True, 2

    @staticmethod
    def forward_math(xp, z, t, ignore_index=-100, label_smoothing=0.0, scale=1.0):
        m = xp.max(z, axis=-1, keepdims=True)
        e = xp.exp(z - m)
        s = xp.sum(e, axis=-1, keepdims=True)
        z_t = xp.take_along_axis(z, _target(xp, t, ignore_index), axis=-1)
        loss = (m + xp.log(s) - (1.0 - label_smoothing) * z_t)[..., 0]
        if label_smoothing:
            loss = loss - label_smoothing * xp.mean(z, axis=-1)
        return xp.where(t != ignore_index, scale * loss, 0.0), e, s[..., 0]  # the loss; e, s

    def forward(ctx, z, t, summed=False, **params):
        loss = FusedFunction.forward(ctx, z, t, **params)
        return loss.sum() if summed else loss

    @classmethod
    def composed(cls, z, t, summed=False, **params):
        loss = super().composed(z, t, **params)
        return loss.sum() if summed else loss

    @staticmethod
    def backward_math(
        xp, g, e, s, z, t, ignore_index=-100, label_smoothing=0.0, scale=1.0, summed=False
    ):  # (summed: g is one number, for every row)
        w = xp.where(t != ignore_index, scale * g, 0.0)[..., None]  # g, 0 for ignored rows
        dz = e * (w / s[..., None])  # g p
        if label_smoothing:
            dz -= w * (label_smoothing / z.shape[-1])  # g (p - ε/C)
        at = _target(xp, t, ignore_index)  # and - g (1 - ε) at the target
        xp.put_along_axis(
            dz, at, xp.take_along_axis(dz, at, axis=-1) - (1.0 - label_smoothing) * w, axis=-1
        )
        return dz


def _target(xp, t, ignore_index):
    """t as a (..., 1) index, an ignored row's pointing at class 0 (its loss is masked)."""
    return xp.where(t != ignore_index, t, 0)[..., None]


def cross_entropy(
    logits: Tensor,
    targets,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> Tensor:
    """Softmax cross-entropy of logits (N, C) or (B, T, C) against integer targets (N,) or
    (B, T). Targets equal to ``ignore_index`` contribute nothing (and "mean" averages over the
    others, as PyTorch does); ``label_smoothing`` ε mixes the one-hot target with the uniform
    distribution, q = (1 - ε) onehot + ε/C. ``reduction``: "mean", "sum" or "none" (per-target
    losses)."""
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
    # one read from the device for the range check and M, the rows not ignored
    xp = xp_of(t)
    lo, hi, M = (
        host_ints(t.min(), t.max(), xp.count_nonzero(t != ignore_index)) if t.size else (0, 0, 0)
    )
    if lo < 0 or hi >= C:
        bad = t[(t != ignore_index) & ((t < 0) | (t >= C))]
        if bad.size:
            raise ValueError(
                f"cross_entropy: target {int(bad.reshape(-1)[0])} is not a class of the "
                f"logits (0..{C - 1}) nor ignore_index={ignore_index}"
            )
    targets = targets if isinstance(targets, Tensor) else tl.as_tensor(t)
    return CrossEntropyFn.apply(
        logits,
        targets,
        ignore_index=int(ignore_index),
        label_smoothing=float(label_smoothing),
        scale=1.0 / max(M, 1) if reduction == "mean" else 1.0,  # (every target ignored: 0)
        summed=reduction != "none",
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
