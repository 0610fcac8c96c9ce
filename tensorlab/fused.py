"""Fused GPU kernels, written once as Python and checked on the CPU.

On a GPU every array operation is one kernel launch that reads its inputs from memory and
writes its output back. GELU's forward written as array operations (its CPU form in
``nn/activation.py``) is about twenty of them: twenty launches, twenty trips through memory,
where one kernel that keeps each number in a register would do. ``cupy.fuse`` makes that one
kernel from a Python function of arrays: it traces the function once per signature (dtypes
and numbers of axes) and compiles the traced elementwise code.

:func:`fused` turns ``math(xp, *arrays)``, a function written with ``xp``'s operations, into
such a kernel::

    @fused
    def silu_kernel(xp, x):
        return x * (0.5 + 0.5 * xp.tanh(0.5 * x))

    silu_kernel(cupy_array)   # one compiled kernel (traced on the first call)
    silu_kernel(numpy_array)  # the same function, run by NumPy operation by operation

The NumPy run is how the CPU test suite checks a kernel's arithmetic against the op's CPU
form without a GPU; on a GPU the same tests compare the compiled kernel with the CPU form.
The ops call their kernels on CuPy arrays only: NumPy has no kernel fusion, and the CPU forms
are written for its speed (in place, in cache-sized blocks).

A kernel may use arithmetic, comparisons, ufuncs and ``xp.where`` (``xp.erf`` too, which is
``cupyx.scipy.special.erf`` on the GPU and :func:`tensorlab.backend.erf_exact` on NumPy), may
update its arguments in place (``m *= b``; it then returns nothing) and may return one array
or a tuple. Python scalars among the arguments keep the arrays' dtype, as they do in NumPy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from tensorlab import backend
from tensorlab.backend import erf_exact, xp_of


class _ArrayMath:
    """The ``xp`` a kernel is written against: an array module's functions, plus ``erf``."""

    def __init__(self, module, erf):
        self._module, self.erf = module, erf

    def __getattr__(self, name):
        return getattr(self._module, name)


NUMPY = _ArrayMath(np, erf_exact)


class fused:  # noqa: N801 - used as a decorator, like functools.cache
    """A kernel from ``math(xp, *args)``: compiled by ``cupy.fuse`` for CuPy arrays (once per
    signature, on first use), run as written on NumPy arrays. ``kernel.math`` is the function."""

    def __init__(self, math: Callable):
        functools.update_wrapper(self, math)
        self.math = math
        self._compiled = None

    def __call__(self, *args):
        if xp_of(args[0]) is np:
            return self.math(NUMPY, *args)
        if self._compiled is None:  # pragma: no cover - needs a GPU
            self._compiled = _compile(self.math)
        return self._compiled(*args)  # pragma: no cover


def on_cupy(math: Callable, cupy) -> Callable:
    """``math`` with CuPy as its ``xp``: the function of arrays that ``cupy.fuse`` traces
    (tests/cuda_compile.py traces and compiles it on a machine with no GPU)."""
    from cupyx.scipy.special import erf

    return functools.partial(math, _ArrayMath(cupy, erf))


def _compile(math: Callable):  # pragma: no cover - needs a GPU
    return backend.cupy.fuse(kernel_name=math.__name__)(on_cupy(math, backend.cupy))
