"""Optimizers, gradient clipping and the learning-rate schedule.

An optimizer owns *param groups*: dicts of ``"params"`` (a list of Parameters) and that
group's hyperparameters (``lr``, ``weight_decay``, ...; :func:`param_groups_for_decay`).
``step()`` updates each ``p.data`` from ``p.grad`` in place, on the raw arrays, and bumps the
parameter's version (the engine notices a tensor saved for backward being changed).

Notation, per parameter ``p`` with gradient ``g`` at step ``t = 1, 2, ...``: learning rate
``η``, weight decay ``λ``, momentum ``μ``, Adam's ``β1, β2, ε``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from nn.checks import bad_value, check_nonnegative, check_real
from nn.module import zero_grads
from tensorlab import Tensor
from tensorlab.backend import to_device, xp_for, xp_of
from tensorlab.fused import fused

ParamsArg = Iterable[Tensor] | Iterable[dict]


def _is_array(x) -> bool:
    """True for NumPy and CuPy arrays (the per-parameter state), False for numbers."""
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


class Optimizer:
    """Base class: param groups, ``zero_grad``, ``state_dict``/``load_state_dict``.

    ``params`` is an iterable of Parameters, or of dicts ``{"params": [...], **hyperparameters}``
    (one per group); a group's missing hyperparameters are taken from ``defaults``.
    ``self.state[p]`` holds the per-parameter state (momentum buffers, moments, step counts).
    """

    def __init__(self, params: ParamsArg, defaults: dict):
        self.defaults = defaults
        self.param_groups: list[dict] = []
        self.state: dict[Tensor, dict] = {}
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        """Add a group of parameters with its own hyperparameters (defaults fill the rest)."""
        group = dict(group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer params must be Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor (it has a grad_fn)")
            if id(p) in seen:
                raise ValueError(
                    f"a parameter of shape {p.shape} appears in more than one param group"
                )
            seen.add(id(p))
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self.check_group(group)
        self.param_groups.append(group)

    def check_group(self, group: dict) -> None:
        """Refuse a group's hyperparameters that would update wrongly (the defaults are in
        every group, so they are checked here too); a one-line error names the value."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """:func:`nn.module.zero_grads` of every parameter."""
        zero_grads((p for g in self.param_groups for p in g["params"]), set_to_none)

    def step(self) -> None:
        """Update every parameter that has a gradient, in place."""
        raise NotImplementedError(f"{type(self).__name__}.step")

    # ------------------------------------------------------------------ saving and resuming
    def state_dict(self) -> dict:
        """Everything needed to resume exactly, as numbers and NumPy arrays (copies):
        ``{"state": {index: {name: array or number}}, "param_groups": [{hyper..., "params":
        [index, ...]}]}``, a parameter named by its position across all groups."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups = []
        for g in self.param_groups:
            saved = {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()}
            saved["params"] = [index[id(p)] for p in g["params"]]
            groups.append(saved)
        state = {}
        for p, s in self.state.items():
            state[index[id(p)]] = {
                k: (to_device(v, "cpu").copy() if _is_array(v) else v) for k, v in s.items()
            }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what :meth:`state_dict` saved (integer keys may be strings, as after JSON).
        Other groups, other numbers of parameters or state arrays of another shape than their
        parameter's raise ValueError, and nothing is changed."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(
                f"load_state_dict: the state has {len(groups)} param groups, this optimizer "
                f"has {len(self.param_groups)}"
            )
        params = [p for g in self.param_groups for p in g["params"]]
        for i, (saved, own) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(own["params"]):
                raise ValueError(
                    f"load_state_dict: param group {i} has {len(saved['params'])} parameters in "
                    f"the state but {len(own['params'])} in this optimizer"
                )
        new_state: dict[Tensor, dict] = {}
        for key, s in state_dict["state"].items():
            i = int(key)
            if not 0 <= i < len(params):
                raise ValueError(
                    f"load_state_dict: state for parameter {i}, but there are only "
                    f"{len(params)} parameters"
                )
            p = params[i]
            xp = xp_for(p.device)
            entry = {}
            for k, v in s.items():
                if _is_array(v):
                    if tuple(v.shape) != p.shape:
                        raise ValueError(
                            f"load_state_dict: state {k!r} of parameter {i} has shape "
                            f"{tuple(v.shape)} but the parameter has shape {p.shape}"
                        )
                    v = xp.array(to_device(v, p.device), dtype=p.dtype)  # a copy
                entry[k] = v
            new_state[p] = entry
        for saved, own in zip(groups, self.param_groups):
            for k, v in saved.items():
                if k != "params":
                    own[k] = tuple(v) if isinstance(own.get(k), tuple) else v
        self.state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            hyper = ", ".join(f"{k}={v}" for k, v in g.items() if k != "params")
            lines.append(f"  group {i}: {len(g['params'])} params, {hyper}")
        return "\n".join(lines) + "\n)"


# ------------------------------------------------------------------ SGD
class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and L2 decay.

    ::

        g ← g + λ·p                                   (weight decay, if λ > 0)
        b ← g                        at the first step (momentum buffer, if μ > 0)
        b ← μ·b + (1 − dampening)·g  afterwards
        d ← g + μ·b  (nesterov)   or   d ← b  (classic momentum)   or   d ← g  (μ = 0)
        p ← p − η·d
    """

    def __init__(
        self,
        params: ParamsArg,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening)
        defaults.update(weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, defaults)

    def check_group(self, group: dict) -> None:
        names = ("lr", "momentum", "dampening", "weight_decay")
        check_nonnegative("SGD", **{k: group[k] for k in names})
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")

    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group)

    def _update(self, p: Tensor, group: dict) -> None:
        lr, mu, damp = group["lr"], group["momentum"], group["dampening"]
        wd, nesterov = group["weight_decay"], group["nesterov"]
        d = p.grad.data
        if wd != 0:
            d = d + wd * p.data  # a new array: the gradient itself is left alone
        if mu != 0:
            state = self.state.setdefault(p, {})
            buf = state.get("momentum_buffer")
            if buf is None:
                # xp.array copies, and keeps a 0-d array an array (d.copy() of a
                # NumPy scalar would be a scalar, which `buf *= mu` cannot change)
                buf = state["momentum_buffer"] = xp_of(d).array(d)
            else:
                buf *= mu
                buf += (1 - damp) * d
            d = d + mu * buf if nesterov else buf
        p.data -= lr * d
        p._vc[0] += 1  # the in-place update is a new version


# ------------------------------------------------------------------ Adam and AdamW
class Adam(Optimizer):
    """Adam (Kingma & Ba 2015) with L2 weight decay coupled into the gradient.

    ::

        g ← g + λ·p                       (L2 decay: it passes through the adaptive scaling)
        m ← β1·m + (1 − β1)·g             (first moment, m₀ = 0)
        v ← β2·v + (1 − β2)·g²            (second moment, v₀ = 0)
        m̂ = m / (1 − β1ᵗ),  v̂ = v / (1 − β2ᵗ)   (bias correction for the zero start)
        p ← p − η · m̂ / (√v̂ + ε)

    A step is one :func:`adam_kernel` over all the parameters of a group (one launch on a GPU).
    """

    decoupled = False  # AdamW sets this: decay the weights directly instead of the gradient
    default_weight_decay = 0.0  # (AdamW: 1e-2, as in PyTorch)

    def __init__(
        self,
        params: ParamsArg,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float | None = None,
    ):
        if weight_decay is None:
            weight_decay = self.default_weight_decay
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def check_group(self, group: dict) -> None:
        name = type(self).__name__
        check_nonnegative(name, **{k: group[k] for k in ("lr", "eps", "weight_decay")})
        betas = group["betas"]
        if len(betas) != 2:
            raise bad_value("betas", betas, "must be two numbers in [0, 1)", name)
        for i, b in enumerate(betas):
            check_real(f"betas[{i}]", b, 0.0, 1.0, open_hi=True, owner=name)

    def _next_state(self, p: Tensor) -> dict:
        """``p``'s state with its step count advanced (zero moments at the first step)."""
        state = self.state.get(p)
        if state is None:
            zeros = xp_of(p.data).zeros_like
            state = self.state[p] = {"step": 0, "m": zeros(p.data), "v": zeros(p.data)}
        state["step"] += 1
        return state

    def step(self) -> None:
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = (group[k] for k in ("lr", "betas", "eps", "weight_decay"))
            decay, l2 = (1 - lr * wd, 0.0) if self.decoupled else (1.0, wd)
            by_step: dict[int, list[Tensor]] = {}  # one launch per step count (usually one)
            for p in group["params"]:
                if p.grad is not None:
                    by_step.setdefault(self._next_state(p)["step"], []).append(p)
            for t, params in by_step.items():
                states = [self.state[p] for p in params]
                arrays = (
                    [p.data for p in params],
                    [p.grad.data for p in params],
                    [s["m"] for s in states],
                    [s["v"] for s in states],
                )
                bias = lr / (1 - b1**t), math.sqrt(1 - b2**t)  # step size, √(1 − β2ᵗ)
                adam_kernel.each(arrays, b1, 1 - b1, b2, 1 - b2, *bias, eps, decay, l2)
                for p in params:
                    p._vc[0] += 1  # the in-place update is a new version


@fused
def adam_kernel(xp, w, g, m, v, b1, c1, b2, c2, step_size, bc2_sqrt, eps, decay, l2):
    """:class:`Adam`'s update of one parameter, in place on w, m and v, with m̂ and v̂ written
    out: w ← decay·w − step_size · m / (√v / bc2_sqrt + ε) after g ← g + l2·w (c1 = 1 − β1,
    c2 = 1 − β2, step_size = η/(1 − β1ᵗ), bc2_sqrt = √(1 − β2ᵗ); AdamW: decay = 1 − ηλ,
    l2 = 0; Adam: decay = 1, l2 = λ)."""
    g = g + l2 * w
    w *= decay
    m *= b1
    m += g * c1
    v *= b2
    v += g * g * c2
    w -= m / (xp.sqrt(v) / bc2_sqrt + eps) * step_size


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019): the weights shrink
    directly, not through the gradient, so the decay is not rescaled by ``1 / √v̂``::

        p ← p − η·λ·p,  then :class:`Adam`'s step with the raw gradient g (no g ← g + λ·p)
    """

    decoupled = True
    default_weight_decay = 1e-2


def param_groups_for_decay(module, weight_decay: float) -> list[dict]:
    """Two param groups, following nanoGPT's rule: every parameter with 2 or more axes (matrices
    of linear layers, embeddings) decays; 1-D ones (biases, norm gains) and scalars do not.

    ``[{"params": matrices, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0}]``
    (parameters with ``requires_grad=False`` are left out).
    """
    decay, no_decay = [], []
    for p in module.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


# ------------------------------------------------------------------ gradient clipping
def clip_grad_norm_(params: Iterable[Tensor] | Tensor, max_norm: float, eps: float = 1e-6) -> float:
    """Scale all gradients together so that their joint L2 norm is at most ``max_norm``.

    ::

        n = √(Σ_p Σ_i g_pi²)        (accumulated in float64)
        g ← g · max_norm / (n + ε)   for every gradient, if that factor is below 1

    Returns ``n``, the norm before clipping. Gradients are scaled in place, by one
    :func:`scale_kernel` over all of them; a NaN or infinite norm leaves NaNs (or zeros) in
    them: check the returned value.
    """
    if isinstance(params, Tensor):
        params = [params]
    # (a negative max_norm would flip every gradient's sign, a NaN one make them NaN; ∞: none)
    check_real("max_norm", max_norm, 0.0, owner="clip_grad_norm_", finite=False)
    grads = [p.grad.data for p in params if p.grad is not None]
    if not grads:
        return 0.0
    norm = math.sqrt(float(sum_of_squares(grads)))
    scale = max_norm / (norm + eps)
    if scale < 1.0 or math.isnan(scale):
        scale_kernel.each((grads,), scale)
    return norm


def sum_of_squares(grads: list) -> object:
    """Σ g² over all the arrays in float64 (:func:`square_kernel`, one launch on a GPU), as a
    0-d array on their device. Not finite exactly when some entry is inf or NaN (a float32
    entry squared is at most 1.2e77: float64 does not overflow)."""
    return square_kernel.each_sum((grads,))


@fused
def square_kernel(xp, g):
    """g², computed in float64: a term of the gradients' sum of squares."""
    g = g.astype(xp.float64)
    return g * g


@fused
def scale_kernel(xp, g, s):
    """g ← s·g, in place: clipping's and the loss scaler's rescaling of every gradient."""
    g *= s


# ------------------------------------------------------------------ learning-rate schedules
def cosine_with_warmup(step: int, warmup: int, total: int, lr: float, min_lr: float) -> float:
    """Linear warmup, then a half cosine from ``lr`` down to ``min_lr`` (as in nanoGPT)::

        step < warmup:           lr · (step + 1) / (warmup + 1)
        warmup <= step < total:  min_lr + ½ (1 + cos(π · r)) · (lr − min_lr),
                                 r = (step − warmup) / (total − warmup)
        step >= total:           min_lr

    The warmup never gives 0 (step 0 already learns), and reaches ``lr`` at ``step = warmup``.
    """
    if warmup < 0 or total < warmup:
        raise ValueError(f"need 0 <= warmup <= total, got warmup={warmup}, total={total}")
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step >= total:
        return min_lr
    r = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (lr - min_lr)
