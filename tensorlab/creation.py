"""Functions that make new tensors: from data, filled with constants, ranges, random draws."""

from __future__ import annotations

import numpy as np

from tensorlab.backend import (
    BFLOAT16,
    DEFAULT_DTYPE,
    default_device,
    generator,
    xp_for,
    xp_of,
)
from tensorlab.tensor import Tensor, sizes_of


def _make(data, requires_grad: bool) -> Tensor:
    t = Tensor._wrap(data)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(
    data,
    dtype=None,
    device: str | None = None,
    requires_grad: bool = False,
    name: str | None = None,
) -> Tensor:
    """A tensor from nested lists, scalars, an array or a Tensor, on ``device`` (default: the
    default device, :func:`tensorlab.backend.default_device`). Python floats become float32.
    Always a copy, as ``torch.tensor``: changing ``data`` afterwards leaves the tensor alone
    (:func:`from_numpy` shares memory instead)."""
    device = device or default_device()
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device, name=name)


def zeros(
    *shape, dtype=DEFAULT_DTYPE, device: str | None = None, requires_grad: bool = False
) -> Tensor:
    return _make(xp_for(device).zeros(sizes_of(shape), dtype=dtype), requires_grad)


def ones(
    *shape, dtype=DEFAULT_DTYPE, device: str | None = None, requires_grad: bool = False
) -> Tensor:
    return _make(xp_for(device).ones(sizes_of(shape), dtype=dtype), requires_grad)


def full(
    shape, value, dtype=DEFAULT_DTYPE, device: str | None = None, requires_grad: bool = False
) -> Tensor:
    return _make(xp_for(device).full(sizes_of((shape,)), value, dtype=dtype), requires_grad)


def arange(start, stop=None, step=1, dtype=None, device: str | None = None) -> Tensor:
    """Like ``numpy.arange``: integers give an int64 tensor, floats a float32 one."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError(f"arange: step must not be 0 (start {start}, stop {stop})")
    if dtype is None:
        is_int = all(isinstance(v, int | np.integer) for v in (start, stop, step))
        dtype = np.int64 if is_int else DEFAULT_DTYPE
    return Tensor._wrap(xp_for(device).arange(start, stop, step, dtype=dtype))


def eye(
    n: int,
    m: int | None = None,
    dtype=DEFAULT_DTYPE,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    return _make(xp_for(device).eye(n, m, dtype=dtype), requires_grad)


def randn(
    *shape, dtype=DEFAULT_DTYPE, device: str | None = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal draws from the device's generator (see ``manual_seed``)."""
    data = generator(device).standard_normal(sizes_of(shape), dtype=np.dtype(dtype).type)
    return _make(data, requires_grad)


def rand(
    *shape, dtype=DEFAULT_DTYPE, device: str | None = None, requires_grad: bool = False
) -> Tensor:
    """Uniform draws on [0, 1) from the device's generator."""
    data = generator(device).random(sizes_of(shape), dtype=np.dtype(dtype).type)
    return _make(data, requires_grad)


def randint(low: int, high: int, shape, device: str | None = None) -> Tensor:
    """Integers drawn uniformly from [low, high)."""
    return Tensor._wrap(generator(device).integers(low, high, size=sizes_of((shape,))))


def _like(fn, t: Tensor, dtype, requires_grad, *args) -> Tensor:
    xp = xp_of(t.data)
    return _make(getattr(xp, fn)(t.data, *args, dtype=dtype or t.dtype), requires_grad)


def zeros_like(t: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like("zeros_like", t, dtype, requires_grad)


def ones_like(t: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like("ones_like", t, dtype, requires_grad)


def full_like(t: Tensor, value, dtype=None, requires_grad: bool = False) -> Tensor:
    return _like("full_like", t, dtype, requires_grad, value)


def randn_like(t: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    return randn(*t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def rand_like(t: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    return rand(*t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing ``array``'s memory (no copy, dtype kept, as ``torch.from_numpy``):
    writing to one changes the other. A change made through the NumPy array is not seen by
    the tensor's version counter, so change it only when no backward still needs it.
    (:func:`tensor` copies.)"""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a NumPy array, got {type(array).__name__}")
    if not (array.dtype.kind in "biufc" or array.dtype == BFLOAT16):
        raise TypeError(f"from_numpy: dtype {array.dtype} is not numeric; give a numeric array")
    return Tensor._wrap(array)


def as_tensor(array) -> Tensor:
    """A constant tensor around a NumPy or CuPy ``array`` of the engine's dtypes, without a
    copy or a check (what ``torch.as_tensor`` is for an array on its device): the masks, counts
    and device copies that layers make from arrays they computed."""
    return Tensor._wrap(array)


def from_dlpack(obj) -> Tensor:
    """A tensor sharing memory with any DLPack producer (PyTorch, CuPy, JAX, NumPy arrays)."""
    device_type, _ = obj.__dlpack_device__()
    if device_type == 1:  # kDLCPU
        return Tensor._wrap(np.from_dlpack(obj))  # host: the producer's memory is on the CPU
    return Tensor._wrap(xp_for("cuda").from_dlpack(obj))
