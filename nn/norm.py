"""Layer norm and RMS norm over the last axis: their ops, functions and layers.

float16 and bfloat16 rows are normalized in float32 (the statistics of a row of d numbers need
more than 8 or 11 bits) and the result is rounded back to the input's dtype.

Notation (per row of d features): μ = mean(x), σ = √(mean((x - μ)²) + ε) for layer norm and
σ = √(mean(x²) + ε) for RMS norm; x̂ = (x - μ)/σ resp. x/σ; γ the gain, β the bias; g = dL/dy
and ĝ = g ⊙ γ the gradient arriving at x̂.
"""

from __future__ import annotations

import contextlib

import numpy as np

from nn.checks import check_nonnegative
from nn.init import constant
from nn.linear import mean_last, sum_rows
from nn.module import HookPoint, Module, close_hook_points, identity, switched
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE, acc_dtype, in_float32, rounded, xp_of
from tensorlab.function import Function
from tensorlab.fused import fused


def _backward(ctx, g, centred: bool):
    """Both norms' closed-form backward on arrays (the class docstrings give the formulas):
    dx = (1/σ)(ĝ [- mean(ĝ)] - x̂ ⊙ mean(ĝ ⊙ x̂)), the bracket for layer norm only;
    dγ = Σ_rows g ⊙ x̂; dβ = Σ_rows g."""
    x, *affine = ctx.inputs
    xhat = ctx.xhat
    g = g.data.astype(xhat.dtype, copy=False)  # float32 for half inputs (see the module doc)
    if xp_of(g) is not np:
        return _backward_on_gpu(ctx, g, centred)
    gh = g * affine[0].data if affine else g
    dx = None
    if x.requires_grad:
        dx = gh - xhat * mean_last(gh * xhat)
        if centred:
            dx -= mean_last(gh)
        dx *= ctx.rstd
    dgamma = sum_rows(g * xhat) if affine and affine[0].requires_grad else None
    dbeta = sum_rows(g) if len(affine) == 2 and affine[1].requires_grad else None
    return dx, dgamma, dbeta


# On a GPU each array operation above is a kernel launch: layer norm's forward takes ten and its
# backward eleven. The fused kernels below do the elementwise work between the row reductions
# (which stay matrix-vector products, as on the CPU) in one launch each: five launches forward,
# six backward, with the same operations in the same order as the CPU form.
def _normalize_on_gpu(ctx, x, affine, eps, centred: bool):
    """x̂ and y of either norm (μ = 0 for RMS norm, γ = 1 and β = 0 when left out)."""
    mu = mean_last(x) if centred else 0.0
    rstd = inverse_std_kernel(mean_last(centred_square_kernel(x, mu)), eps)
    gain, bias = affine[0] if affine else 1.0, affine[1] if len(affine) == 2 else 0.0
    xhat, y = normalize_kernel(x, mu, rstd, gain, bias)
    ctx.xhat, ctx.rstd = xhat, rstd
    return y


def _backward_on_gpu(ctx, g, centred: bool):
    """:func:`_backward` in six launches."""
    x, *affine = ctx.inputs
    gh, ghx, gx = norm_grad_parts_kernel(g, affine[0].data if affine else 1.0, ctx.xhat)
    dx = None
    if x.requires_grad:
        mean_gh = mean_last(gh) if centred else 0.0
        dx = norm_grad_kernel(gh, ctx.xhat, mean_last(ghx), mean_gh, ctx.rstd)
    dgamma = sum_rows(gx) if affine and affine[0].requires_grad else None
    dbeta = sum_rows(g) if len(affine) == 2 and affine[1].requires_grad else None
    return dx, dgamma, dbeta


@fused
def centred_square_kernel(xp, x, mu):
    """(x - μ)², whose row means are the variance (μ = 0: x², RMS norm's mean square)."""
    d = x - mu
    return d * d


@fused
def inverse_std_kernel(xp, var, eps):
    """1/σ = 1/√(var + ε), one number per row."""
    return 1.0 / xp.sqrt(var + eps)


@fused
def normalize_kernel(xp, x, mu, rstd, gain, bias):
    """x̂ = (x - μ)/σ and y = x̂ ⊙ γ + β."""
    xhat = (x - mu) * rstd
    return xhat, xhat * gain + bias


@fused
def norm_grad_parts_kernel(xp, g, gain, xhat):
    """ĝ = g ⊙ γ, ĝ ⊙ x̂ (whose row means dx needs) and g ⊙ x̂ (whose column sums are dγ)."""
    gh = g * gain
    return gh, gh * xhat, g * xhat


@fused
def norm_grad_kernel(xp, gh, xhat, mean_ghx, mean_gh, rstd):
    """dx = (1/σ)(ĝ - x̂ ⊙ mean(ĝ ⊙ x̂) - mean(ĝ)), mean(ĝ) = 0 for RMS norm."""
    return (gh - xhat * mean_ghx - mean_gh) * rstd


class LayerNormFn(Function):
    """y = x̂ ⊙ γ + β with x̂ = (x - μ)/σ over the last axis (Ba et al. 2016), as one node.

    Backward (the mean and the variance both depend on every x_j of the row)::

        dx = (1/σ) (ĝ - mean(ĝ) - x̂ ⊙ mean(ĝ ⊙ x̂)),   dγ = Σ_rows g ⊙ x̂,   dβ = Σ_rows g.

    ``apply(x, γ, β, eps=...)``; γ and β may be left out (``apply(x, γ)``, ``apply(x)``).
    """

    def forward(ctx, x, *affine, eps):
        xp, (x, half) = xp_of(x), in_float32(x)
        if xp is not np:  # a GPU: five launches (_normalize_on_gpu)
            return rounded(_normalize_on_gpu(ctx, x, affine, eps, centred=True), half)
        xhat = x - mean_last(x)  # x - μ, scaled in place into x̂ below
        var = mean_last(xp.square(xhat))
        var += eps
        rstd = xp.divide(1.0, xp.sqrt(var, out=var), out=var)  # 1/σ
        xhat *= rstd
        ctx.xhat, ctx.rstd = xhat, rstd
        if not affine:
            return rounded(xhat, half)
        y = xhat * affine[0]
        if len(affine) == 2:
            y += affine[1]
        return rounded(y, half)

    def backward(ctx, g):
        return _backward(ctx, g, centred=True)

    @staticmethod
    def composed(x, *affine, eps):
        return layer_norm_composed(x, *affine, eps=eps)


class RMSNormFn(Function):
    """y = x̂ ⊙ γ with x̂ = x/σ, σ = √(mean(x²) + ε) over the last axis (Zhang & Sennrich
    2019), as one node.

    Backward (only the scale depends on the row; no centring)::

        dx = (1/σ) (ĝ - x̂ ⊙ mean(ĝ ⊙ x̂)),   dγ = Σ_rows g ⊙ x̂.

    ``apply(x, γ, eps=...)`` or ``apply(x, eps=...)``.
    """

    def forward(ctx, x, *gain, eps):
        xp, (x, half) = xp_of(x), in_float32(x)
        if xp is not np:  # a GPU: four launches (_normalize_on_gpu)
            return rounded(_normalize_on_gpu(ctx, x, gain, eps, centred=False), half)
        var = mean_last(xp.square(x))
        var += eps
        rstd = xp.divide(1.0, xp.sqrt(var, out=var), out=var)  # 1/σ
        xhat = x * rstd
        ctx.xhat, ctx.rstd = xhat, rstd
        y = xhat * gain[0] if gain else xhat
        return rounded(y, half)

    def backward(ctx, g):
        return _backward(ctx, g, centred=False)

    @staticmethod
    def composed(x, *gain, eps):
        return rms_norm_composed(x, *gain, eps=eps)


def layer_norm_composed(
    x: Tensor, *affine: Tensor, eps: float, hook_scale=identity, hook_normalized=identity
) -> Tensor:
    """:class:`LayerNormFn`'s function in engine ops, one step a line, half inputs in float32
    as there. ``hook_scale`` sees σ (..., 1) and ``hook_normalized`` x̂ (..., d), as in
    TransformerLens, and may replace them."""
    x, half = _float32(x)
    xc = x - x.mean(axis=-1, keepdims=True)
    scale = hook_scale(((xc * xc).mean(axis=-1, keepdims=True) + eps).sqrt())
    y = hook_normalized(xc / scale)
    if affine:
        y = y * affine[0]
    y = y + affine[1] if len(affine) == 2 else y
    return y if half is None else y.astype(half)


def rms_norm_composed(
    x: Tensor, *gain: Tensor, eps: float, hook_scale=identity, hook_normalized=identity
) -> Tensor:
    """:class:`RMSNormFn`'s function in engine ops (hooks as :func:`layer_norm_composed`)."""
    x, half = _float32(x)
    scale = hook_scale(((x * x).mean(axis=-1, keepdims=True) + eps).sqrt())
    y = hook_normalized(x / scale)
    y = y * gain[0] if gain else y
    return y if half is None else y.astype(half)


def _float32(x: Tensor) -> tuple[Tensor, object]:
    """(x, None), or (x in float32, its half dtype): :func:`in_float32` for Tensors."""
    acc = acc_dtype(x.data)
    return (x, None) if acc is None else (x.astype(acc), x.dtype)


def check_norm_shapes(op: str, x: Tensor, *affine: Tensor | None) -> None:
    """Refuse what would broadcast into a wrong answer: a 0-d input (no last axis to normalize)
    and a weight or bias that is not (d,) for x's last axis of d (a (B, 1) input and a (4,)
    weight would broadcast to (B, 4) of biases)."""
    if not x.shape:
        raise ValueError(f"{op}: a 0-d input has no last axis to normalize")
    d = x.shape[-1]
    for name, t in zip(("weight", "bias"), affine):
        if t is not None and t.shape != (d,):
            raise ValueError(
                f"{op}: the input of shape {x.shape} has {d} features in its last axis, but "
                f"the {name} has shape {t.shape}"
            )


def layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """(x - mean(x)) / √(var(x) + eps) ⊙ weight + bias over the last axis (weight, bias (d,)).

    An empty last axis (d = 0) gives an empty result, as in PyTorch; a 0-d input, or a weight
    or bias of another size than the last axis, is refused (:func:`check_norm_shapes`)."""
    check_norm_shapes("layer_norm", x, weight, bias)
    if x.shape[-1] == 0:  # nothing to normalize: the composed form, all empty
        return LayerNormFn.composed(x, *[t for t in (weight, bias) if t is not None], eps=eps)
    if weight is None:
        if bias is not None:
            raise ValueError("layer_norm: a bias needs a weight (pass ones for a plain bias)")
        return LayerNormFn.apply(x, eps=eps)
    if bias is None:
        return LayerNormFn.apply(x, weight, eps=eps)
    return LayerNormFn.apply(x, weight, bias, eps=eps)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """x / √(mean(x²) + eps) ⊙ weight over the last axis (weight (d,)).

    An empty last axis (d = 0) gives an empty result, as in PyTorch; bad shapes are refused
    (both as :func:`layer_norm`)."""
    check_norm_shapes("rms_norm", x, weight)
    gain = () if weight is None else (weight,)
    if x.shape[-1] == 0:  # nothing to normalize: the composed form, all empty
        return RMSNormFn.composed(x, *gain, eps=eps)
    return RMSNormFn.apply(x, *gain, eps=eps)


class _Norm(Module):
    """What both norm layers share: ``d``, ``eps`` and the path. ``fused`` (the default): one
    node (:class:`LayerNormFn`, :class:`RMSNormFn`); otherwise the composed ops, where the hook
    points ``hook_scale`` σ (..., 1) and ``hook_normalized`` x̂ (..., d) (TransformerLens's
    names) see and may replace the scale and the normalized input. Both paths give the same
    numbers up to rounding. Set ``norm.fused`` or use :func:`composed_norms` to switch."""

    def __init__(self, d: int, eps: float, fused: bool):
        super().__init__()
        check_nonnegative(type(self).__name__, eps=eps)  # (a NaN or negative ε: NaN rows)
        self.d, self.eps = d, eps
        self.hook_scale = HookPoint()
        self.hook_normalized = HookPoint()
        self.fused = fused

    @property
    def fused(self) -> bool:
        return self._fused

    @fused.setter
    def fused(self, value: bool) -> None:
        close_hook_points(
            self._inner_hooks(),
            "the norm is fused (one node: σ and x̂ are not Tensors); set norm.fused = False, or "
            "use nn.composed_norms(model) or gpt.circuits"
            if value
            else None,
            f"{type(self).__name__}.fused = True: remove the hooks on hook_scale and "
            "hook_normalized first (the fused path has no scale or normalized input to hook)",
        )
        object.__setattr__(self, "_fused", bool(value))

    def _inner_hooks(self) -> tuple[HookPoint, HookPoint]:
        return self.hook_scale, self.hook_normalized


def composed_norms(model: Module) -> contextlib.AbstractContextManager:
    """A ``with`` block in which every :class:`LayerNorm` and :class:`RMSNorm` in ``model``
    takes the composed path (``fused = False``), so ``hook_scale`` and ``hook_normalized`` can
    be hooked; afterwards as :func:`nn.composed_attention`."""
    return switched(model, _Norm, "fused", False, _Norm._inner_hooks)


class LayerNorm(_Norm):
    """y = (x - μ)/√(σ² + eps) ⊙ w + b, with μ, σ² the mean and variance of the last axis.

    Parameters: ``w`` (d,) the gain γ (ones), ``b`` (d,) the bias β (zeros), or None with
    ``bias=False``. One node forward and backward (:class:`LayerNormFn`) unless ``fused`` is
    False (the composed ops with the hook points ``hook_scale`` and ``hook_normalized``).
    """

    def __init__(
        self,
        d: int,
        eps: float = 1e-5,
        bias: bool = True,
        fused: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        super().__init__(d, eps, fused)
        self.w = constant((d,), 1.0, dtype, device)
        self.b = constant((d,), 0.0, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            return layer_norm(x, self.w, self.b, self.eps)
        check_norm_shapes("LayerNorm", x, self.w, self.b)
        affine = (self.w,) if self.b is None else (self.w, self.b)
        hooks = dict(hook_scale=self.hook_scale, hook_normalized=self.hook_normalized)
        return layer_norm_composed(x, *affine, eps=self.eps, **hooks)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}, bias={self.b is not None}"


class RMSNorm(_Norm):
    """y = x/√(mean(x²) + eps) ⊙ w over the last axis (Zhang & Sennrich 2019): LayerNorm
    without centring and without bias. Parameter ``w`` (d,), ones. ``fused`` and the hook
    points as :class:`LayerNorm`."""

    def __init__(
        self,
        d: int,
        eps: float = 1e-6,
        fused: bool = True,
        dtype=DEFAULT_DTYPE,
        device: str | None = None,
    ):
        super().__init__(d, eps, fused)
        self.w = constant((d,), 1.0, dtype, device)

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            return rms_norm(x, self.w, self.eps)
        check_norm_shapes("RMSNorm", x, self.w)
        hooks = dict(hook_scale=self.hook_scale, hook_normalized=self.hook_normalized)
        return rms_norm_composed(x, self.w, eps=self.eps, **hooks)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"
