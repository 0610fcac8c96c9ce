"""Argument checks shared by the layers and the optimizers: a bad number is refused at
construction, in one line that names the owner, the argument and its value (a NaN learning
rate or ε would otherwise turn every number it touches into NaN, without a word)."""

from __future__ import annotations

import math
import numbers


def check_nonnegative(owner: str, **values) -> None:
    """Each value is a finite real number ≥ 0 (NaN, ∞, a bool or text is refused)."""
    for name, v in values.items():
        real = isinstance(v, numbers.Real) and not isinstance(v, bool)
        if not (real and math.isfinite(v) and v >= 0):
            raise ValueError(f"{owner}: {name}={v!r} must be a finite number >= 0")


def check_count(owner: str, **values) -> None:
    """Each value is an integer ≥ 1 (a NumPy integer too; a bool or a float is refused)."""
    for name, n in values.items():
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{owner}: {name}={n!r} must be an integer >= 1")
