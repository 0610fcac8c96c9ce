"""Weight initialisation: fill a Parameter in place with random or constant values.

Every function takes a Tensor, overwrites its ``.data`` in place (the same array, so
optimizers and hooks still see it), bumps its version, and returns it. Random draws come from
``tensorlab.backend.generator(device)``, so ``tl.manual_seed(s)`` makes them reproducible.

Fan convention (differs from PyTorch!): a linear layer's weight is ``W`` of shape
``(d_in, d_out)`` (``y = x @ W + b``; PyTorch stores ``(out, in)``), so ``fan_in = shape[-2]``
and ``fan_out = shape[-1]``; leading axes index independent matrices (attention heads) and do
not change the fans. (A weight whose leading axis is *summed over*, such as ``W_O`` of shape
``(n_head, d_head, d_model)``, has a true fan-in of ``n_head * d_head``: reshape it to 2-D
before initialising if that matters to you.) 0-D and 1-D tensors have no fans.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from nn.module import Parameter
from tensorlab import Tensor
from tensorlab.backend import DEFAULT_DTYPE, generator, xp_for

_GAINS = {
    "linear": 1.0,
    "identity": 1.0,
    "sigmoid": 1.0,
    "tanh": 5.0 / 3.0,
    "relu": math.sqrt(2.0),
    "selu": 3.0 / 4.0,
}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The gain that keeps activations' variance steady through ``nonlinearity``.

    linear/identity/sigmoid: 1, tanh: 5/3, relu: √2, leaky_relu(a): √(2 / (1 + a²)), selu: 3/4.
    """
    if nonlinearity == "leaky_relu":
        a = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + a * a))
    try:
        return _GAINS[nonlinearity]
    except KeyError:
        known = ", ".join(sorted([*_GAINS, "leaky_relu"]))
        msg = f"unknown nonlinearity {nonlinearity!r}; expected one of {known}"
        raise ValueError(msg) from None


def calculate_fan_in_and_fan_out(shape: tuple[int, ...]) -> tuple[int, int]:
    """``(fan_in, fan_out) = (shape[-2], shape[-1])`` for a weight stored as ``(..., in, out)``."""
    shape = tuple(shape)
    if len(shape) < 2:
        raise ValueError(
            f"fan_in and fan_out need a weight with at least 2 axes (d_in, d_out); got shape "
            f"{shape}. Biases and norm gains are initialised with zeros_/ones_/normal_ instead"
        )
    return shape[-2], shape[-1]


# ------------------------------------------------------------------ the one place that writes
def _random(tensor: Tensor, kind: str):
    """A fresh array of standard draws (``"normal"``: N(0, 1), ``"uniform"``: U[0, 1))."""
    gen = generator(tensor.device)
    dtype = tensor.dtype if tensor.dtype in (np.float32, np.float64) else np.float32
    if kind == "normal":
        return gen.standard_normal(tensor.shape, dtype=dtype)
    return gen.random(tensor.shape, dtype=dtype)


_skip = [False]  # inside empty_parameters(): make no values at all


@contextlib.contextmanager
def empty_parameters():
    """Inside this block new Parameters are left uninitialised (``empty`` arrays, no random
    draws) and the in-place fills below do nothing: for building a model whose every weight a
    checkpoint is about to overwrite (``gpt.hf.from_pretrained``), which then costs no time
    drawing numbers that are thrown away. Load a state dict (strict) before using the model.
    """
    before = _skip[0]
    _skip[0] = True
    try:
        yield
    finally:
        _skip[0] = before


def _write(tensor: Tensor, values) -> Tensor:
    """Copy ``values`` into ``tensor.data`` in place and mark the tensor as changed."""
    if _skip[0]:
        return tensor
    tensor.data[...] = values() if callable(values) else values
    tensor._vc[0] += 1
    return tensor


# ------------------------------------------------------------------ basic fills
def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """``w ~ U[a, b)``, elementwise."""
    return _write(tensor, lambda: a + (b - a) * _random(tensor, "uniform"))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """``w ~ N(mean, std²)``, elementwise."""
    return _write(tensor, lambda: mean + std * _random(tensor, "normal"))


def constant_(tensor: Tensor, value: float) -> Tensor:
    """``w = value`` everywhere."""
    return _write(tensor, value)


def zeros_(tensor: Tensor) -> Tensor:
    """``w = 0`` (biases, LayerNorm's shift)."""
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    """``w = 1`` (LayerNorm's gain)."""
    return constant_(tensor, 1.0)


# ------------------------------------------------------------------ variance-scaling schemes
def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot & Bengio (2010): ``w ~ U[-a, a]``, ``a = gain · √(6 / (fan_in + fan_out))``.

    Keeps the variance of activations and of gradients about equal across layers.
    """
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor.shape)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot & Bengio (2010): ``w ~ N(0, σ²)``, ``σ = gain · √(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor.shape)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    """``σ = gain / √fan`` with ``fan`` the fan-in (forward variance) or fan-out (backward)."""
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', not {mode!r}")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor.shape)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """He et al. (2015): ``w ~ U[-b, b]``, ``b = √3 · gain / √fan`` (so that Var w = gain²/fan).

    ``a`` is the negative slope when ``nonlinearity="leaky_relu"`` (``a=0``: plain ReLU, gain √2).
    """
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(
    tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """He et al. (2015): ``w ~ N(0, σ²)``, ``σ = gain / √fan``."""
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))


# ------------------------------------------------------------------ new parameters
# (the functions above fill a tensor in place; these make a new Parameter, for layers)
def uniform(shape, bound: float, dtype=DEFAULT_DTYPE, device: str | None = None) -> Parameter:
    """A Parameter with entries drawn from U(-bound, bound)."""
    if _skip[0]:
        return _empty(shape, dtype, device)
    data = (generator(device).random(shape) * 2.0 - 1.0) * bound
    return Parameter(data.astype(np.dtype(dtype), copy=False))


def normal(shape, std: float, dtype=DEFAULT_DTYPE, device: str | None = None) -> Parameter:
    """A Parameter with entries drawn from N(0, std²) (:func:`normal_`)."""
    return normal_(_empty(shape, dtype, device), 0.0, std)


def constant(shape, value: float, dtype=DEFAULT_DTYPE, device: str | None = None) -> Parameter:
    """A Parameter filled with ``value`` (zeros for biases, ones for gains)."""
    return constant_(_empty(shape, dtype, device), value)


def _empty(shape, dtype, device: str | None) -> Parameter:
    return Parameter(xp_for(device).empty(shape, dtype=np.dtype(dtype)))


# ------------------------------------------------------------------ GPT-2 defaults
def gpt2_residual_std(n_layer: int, std: float = 0.02) -> float:
    """The std of a residual-stream projection in GPT-2: ``σ = std / √(2 · n_layer)``."""
    if n_layer < 1:
        raise ValueError(f"n_layer must be at least 1, got {n_layer}")
    return std / math.sqrt(2 * n_layer)


def gpt2_residual_init_(tensor: Tensor, n_layer: int, std: float = 0.02) -> Tensor:
    """``w ~ N(0, σ²)`` with ``σ = std / √(2 · n_layer)``: for the output projections of
    attention and MLP, whose outputs add up along the residual stream."""
    return normal_(tensor, 0.0, gpt2_residual_std(n_layer, std))


def _is_bias(name: str) -> bool:
    """``bias``, ``b`` or ``b_*`` (circuits notation: ``b_Q``, ``b_in``) as the last name part."""
    last = name.rsplit(".", 1)[-1]
    return last in ("bias", "b") or last.startswith("b_")


def gpt2_init_(module_or_param, std: float = 0.02):
    """GPT-2's initialisation, in place. Returns its argument.

    On a Tensor: ``w ~ N(0, std²)``. On a Module, for every parameter by name:

    - 2-D or more (linear weights, embeddings): ``w ~ N(0, std²)``;
    - 1-D named ``bias``, ``b`` or ``b_*``: ``w = 0``;
    - other 1-D ones (norm gains) are left as their layer made them (ones).

    Call :func:`gpt2_residual_init_` afterwards on the residual output projections.
    """
    if isinstance(module_or_param, Tensor):
        return normal_(module_or_param, 0.0, std)
    for name, p in module_or_param.named_parameters():
        if p.ndim >= 2:
            normal_(p, 0.0, std)
        elif _is_bias(name):
            zeros_(p)
    return module_or_param
