"""Making parameters: drawn from tensorlab's generators, so ``tl.manual_seed`` fixes them."""

from __future__ import annotations

import numpy as np

from nn.module import Parameter
from tensorlab.backend import DEFAULT_DTYPE, generator, xp_for


def uniform(shape, bound: float, dtype=DEFAULT_DTYPE, device: str = "cpu") -> Parameter:
    """A Parameter with entries drawn from U(-bound, bound)."""
    data = (generator(device).random(shape) * 2.0 - 1.0) * bound
    return Parameter(data.astype(np.dtype(dtype), copy=False))


def normal(shape, std: float, dtype=DEFAULT_DTYPE, device: str = "cpu") -> Parameter:
    """A Parameter with entries drawn from N(0, std²)."""
    data = generator(device).standard_normal(shape, dtype=np.dtype(dtype).type) * std
    return Parameter(data.astype(np.dtype(dtype), copy=False))


def constant(shape, value: float, dtype=DEFAULT_DTYPE, device: str = "cpu") -> Parameter:
    """A Parameter filled with ``value`` (zeros for biases, ones for gains)."""
    return Parameter(xp_for(device).full(shape, value, dtype=np.dtype(dtype)))
