"""Layer norm and RMS norm over the last axis: their ops, functions and layers.

float16 and bfloat16 rows are normalized in float32 (the statistics of a row of d numbers need
more than 8 or 11 bits) and the result is rounded back to the input's dtype.

Notation (per row of d features): μ = mean(x), σ = √(mean((x - μ)²) + ε) for layer norm and
σ = √(mean(x²) + ε) for RMS norm; x̂ = (x - μ)/σ resp. x/σ; γ the gain, β the bias; g = dL/dy
and ĝ = g ⊙ γ the gradient arriving at x̂.
"""

from __future__ import annotations

import contextlib

from nn.checks import check_nonnegative
from nn.init import constant
from nn.module import HookPoint, Module, close_hook_points, identity, switched
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE
from tensorlab.fused_op import FusedFunction


class LayerNormFn(FusedFunction):
    """y = x̂ ⊙ γ + β with x̂ = (x - μ)/σ over the last axis (Ba et al. 2016), as one node.

    Backward (the mean and the variance both depend on every x_j of the row)::

        dx = (1/σ) (ĝ - mean(ĝ) - x̂ ⊙ mean(ĝ ⊙ x̂)),   dγ = Σ_rows g ⊙ x̂,   dβ = Σ_rows g.

    ``apply(x, γ, β, eps=...)``; γ and β may be left out (``apply(x, γ)``, ``apply(x)``: γ = 1,
    β = 0). Saves μ and 1/σ, two numbers per row (as PyTorch does), and the backward recomputes
    x̂ from x: saving x̂ itself kept a second (..., d) array per norm alive until the backward,
    and wrote and read it. The backward formula returns g ⊙ x̂ and g for γ and β; the engine
    sums them over the rows (``Tensor.sum_to``). The composed form takes the hook points
    ``hook_scale`` (σ, (..., 1)) and ``hook_normalized`` (x̂), which may replace what they see."""

    rows, saves = True, 2

    @staticmethod
    def forward_math(xp, x, w=1.0, b=0.0, eps=1e-5, hook_scale=identity, hook_normalized=identity):
        mu = xp.mean(x, axis=-1, keepdims=True)
        xc = x - mu
        rstd = 1.0 / hook_scale(xp.sqrt(xp.mean(xc * xc, axis=-1, keepdims=True) + eps))
        xhat = hook_normalized(xc * rstd)
        return xhat * w + b, mu, rstd

    @staticmethod
    def backward_math(xp, g, mu, rstd, x, w=1.0, b=0.0, eps=1e-5):
        xhat = (x - mu) * rstd  # (the forward's x̂, recomputed: the same operations)
        gh = g * w
        mean_gh = xp.mean(gh, axis=-1, keepdims=True)
        dx = rstd * (gh - mean_gh - xhat * xp.mean(gh * xhat, axis=-1, keepdims=True))
        return dx, g * xhat, g


class RMSNormFn(FusedFunction):
    """y = x̂ ⊙ γ with x̂ = x/σ, σ = √(mean(x²) + ε) over the last axis (Zhang & Sennrich
    2019), as one node.

    Backward (only the scale depends on the row; no centring)::

        dx = (1/σ) (ĝ - x̂ ⊙ mean(ĝ ⊙ x̂)),   dγ = Σ_rows g ⊙ x̂.

    ``apply(x, γ, eps=...)`` or ``apply(x, eps=...)``; saves 1/σ (x̂ = x/σ is recomputed),
    hooks as :class:`LayerNormFn`.
    """

    rows, saves = True, 1

    @staticmethod
    def forward_math(xp, x, w=1.0, eps=1e-6, hook_scale=identity, hook_normalized=identity):
        rstd = 1.0 / hook_scale(xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps))
        xhat = hook_normalized(x * rstd)
        return xhat * w, rstd

    @staticmethod
    def backward_math(xp, g, rstd, x, w=1.0, eps=1e-6):
        xhat = x * rstd
        gh = g * w
        return rstd * (gh - xhat * xp.mean(gh * xhat, axis=-1, keepdims=True)), g * xhat


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
        return LayerNormFn.composed(x, *affine, eps=self.eps, **hooks)

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
        return RMSNormFn.composed(x, self.w, eps=self.eps, **hooks)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"
