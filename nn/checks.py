"""Argument checks, one set for the whole library: the layers, the optimizers and the loss
scaler check their own arguments with these, and the configs (gpt/config.py) their fields, so
that a bad value is refused where it is given, in one line of one form,
``Owner: name=value: rule`` (a NaN learning rate or ε would otherwise turn every number it
touches into NaN, without a word; the owner is left out for a config's fields)."""

from __future__ import annotations

import math
import numbers


class ConfigError(ValueError):
    """A value is invalid. The message names the field, the value and the valid range;
    ``field``, ``value`` and ``rule`` are kept apart so that the command line can name its flag
    (``gpt.ConfigError`` is this class)."""

    def __init__(self, message: str, field: str | None = None, value=None, rule: str = ""):
        super().__init__(message)
        self.field, self.value, self.rule = field, value, rule


def bad_value(name: str, value, rule: str, owner: str | None = None) -> ConfigError:
    """The error ``Owner: name=value: rule`` (``name=value: rule`` without an owner)."""
    head = f"{owner}: " if owner else ""
    return ConfigError(f"{head}{name}={value!r}: {rule}", name, value, rule)


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_int(name: str, v, lo: int, hi: int | None = None, owner: str | None = None) -> None:
    """``v`` is an integer (a NumPy integer too; not a bool, not a float) in [lo, hi]."""
    if not _is_int(v) or v < lo or (hi is not None and v > hi):
        rule = f"must be an integer ≥ {lo}" if hi is None else f"must be an integer in [{lo}, {hi}]"
        raise bad_value(name, v, rule, owner)


def check_real(
    name: str,
    v,
    lo: float,
    hi: float = math.inf,
    open_lo: bool = False,
    open_hi: bool = False,
    owner: str | None = None,
    finite: bool = True,
) -> None:
    """``v`` is a real number (not a bool, not text) in the interval from lo to hi, each end
    open or closed; finite, unless ``finite=False`` lets an upper end of ∞ be taken."""
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isnan(v)
    if ok:
        ok = (v > lo if open_lo else v >= lo) and (v < hi if open_hi else v <= hi)
        ok = ok and (math.isfinite(v) or not finite)
    if not ok:
        left = "(" if open_lo else "["
        right = ")" if open_hi or (hi == math.inf and finite) else "]"
        top = "∞" if hi == math.inf else f"{hi:g}"
        kind = "a finite number" if finite else "a number"
        raise bad_value(name, v, f"must be {kind} in {left}{lo:g}, {top}{right}", owner)


def check_bool(name: str, v, owner: str | None = None) -> None:
    if not isinstance(v, bool):
        raise bad_value(name, v, "must be true or false", owner)


def check_choice(name: str, value, choices, owner: str | None = None) -> None:
    if value not in choices:
        raise bad_value(name, value, f"must be one of {', '.join(map(repr, choices))}", owner)


def check_count(owner: str | None, **values) -> None:
    """Each value is an integer ≥ 1 (sizes, counts)."""
    for name, n in values.items():
        check_int(name, n, 1, owner=owner)


def check_nonnegative(owner: str | None, **values) -> None:
    """Each value is a finite real number ≥ 0 (learning rates, ε, decays)."""
    for name, v in values.items():
        check_real(name, v, 0.0, owner=owner)
