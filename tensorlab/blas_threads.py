"""How many threads NumPy's BLAS (OpenBLAS) uses for one matrix product, changed at run time.

OpenBLAS reads ``OPENBLAS_NUM_THREADS`` once, when NumPy is imported; after that only its C
function ``openblas_set_num_threads`` changes the count. NumPy does not expose it, so this
module finds the OpenBLAS library that NumPy's wheels ship (``numpy.libs/`` on Linux and
Windows, ``numpy/.dylibs/`` on macOS) and calls it through ctypes.

Why change it: N processes of one MPI job on one machine (nn.distributed) want cores/N BLAS
threads each. With OpenBLAS's default of one thread per core, each of their matrix products
would try to use every core, and they would slow each other down several times over.

Where NumPy uses another BLAS (Accelerate, MKL, a system OpenBLAS without these symbols),
:func:`set_blas_threads` changes nothing and returns None.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os

import numpy as np

# Symbol names: NumPy ≥ 2 wheels bundle "scipy-openblas" (64-bit integers, prefixed names);
# older wheels and system builds export the plain names.
_PREFIXES = ("scipy_openblas_", "scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "", "")
_SET = tuple(p + "set_num_threads" + s for p, s in zip(_PREFIXES, _SUFFIXES))
_GET = tuple(p + "get_num_threads" + s for p, s in zip(_PREFIXES, _SUFFIXES))


@functools.cache
def _find() -> tuple:
    """(set, get) of NumPy's OpenBLAS, looked for once; () when there is none to find."""
    root = os.path.dirname(np.__file__)
    candidates = glob.glob(os.path.join(root + ".libs", "*openblas*")) + glob.glob(
        os.path.join(root, ".dylibs", "*openblas*")
    )
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, n) for n in _SET if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in _GET if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            getter.restype = ctypes.c_int
            return setter, getter
    return ()


def get_blas_threads() -> int | None:
    """The number of threads OpenBLAS uses per call, or None if NumPy's BLAS is not found."""
    lib = _find()
    return int(lib[1]()) if lib else None


def set_blas_threads(n: int) -> int | None:
    """Make OpenBLAS use ``n`` threads per call (process-wide); returns the previous count,
    or None (and changes nothing) if NumPy's BLAS is not an OpenBLAS found here."""
    if int(n) < 1:
        raise ValueError(f"set_blas_threads: need at least 1 thread, got {n}")
    lib = _find()
    if not lib:
        return None
    prev = int(lib[1]())
    if prev != n:
        lib[0](ctypes.c_int(int(n)))
    return prev


@contextlib.contextmanager
def blas_threads(n: int):
    """Inside this block OpenBLAS uses ``n`` threads per call; the old count comes back after.

    Changing the count costs OpenBLAS some work (its thread pool is resized), so wrap a whole
    training loop, not each step.
    """
    prev = set_blas_threads(n)
    try:
        yield
    finally:
        if prev is not None:
            set_blas_threads(prev)
