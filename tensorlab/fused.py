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

**Many tensors, one launch.** An optimizer updates every parameter tensor the same way; one
kernel per tensor is hundreds of launches per step (PyTorch's ``foreach`` and ``fused``
optimizers launch one kernel over lists of tensors for this reason). An in-place kernel's
:meth:`fused.each` takes lists: ``adam_kernel.each((ws, gs, ms, vs), b1, ...)`` is
``adam_kernel(ws[i], gs[i], ms[i], vs[i], b1, ...)`` for every ``i``. On NumPy it is that
loop. On a GPU it is one kernel, made from the same traced function: the host writes a table
(each tensor's addresses and size, and for each thread block the tensor and the first element
it covers: :data:`CHUNK` elements a block) and the kernel's block reads its row of that table
and runs the function's code on its elements. The kernel is written once, as the function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

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

    def each(self, arrays: Sequence[Sequence], *scalars) -> None:
        """The kernel on many tensors: ``arrays`` holds one list per array argument, and
        ``kernel(arrays[0][i], arrays[1][i], ..., *scalars)`` runs for every ``i``, in place
        (the kernel must return nothing). On a GPU, one launch for all rows of contiguous
        arrays of the same dtypes (see the module docstring); a row with a strided array runs
        as its own launch of the kernel. On NumPy, a loop."""
        lists = [list(a) for a in arrays]
        n = len(lists[0])
        if any(len(a) != n for a in lists):
            lengths = [len(a) for a in lists]
            raise ValueError(f"{self.__name__}.each: the lists differ in length: {lengths}")
        if n == 0:
            return
        if xp_of(lists[0][0]) is np:  # row by row, as written (lean: clipping calls it per step)
            for row in zip(*lists):
                if self.math(NUMPY, *row, *scalars) is not None:
                    raise TypeError(f"{self.__name__}.each needs a kernel that returns nothing")
            return
        by_dtypes, alone = _rows_by_dtypes(self.__name__, lists)
        for dtypes, rows in by_dtypes.items():
            table, blocks = pointer_table(rows)
            if not blocks:  # only empty tensors: nothing to do (CUDA refuses an empty grid)
                continue
            launch = _each_kernel(self.math, dtypes, tuple(type(s) for s in scalars))
            launch(xp_of(rows[0][0]).asarray(table), len(rows), blocks, scalars)
        for row in alone:
            if self(*row, *scalars) is not None:
                raise TypeError(f"{self.__name__}.each needs a kernel that returns nothing")


def on_cupy(math: Callable, cupy) -> Callable:
    """``math`` with CuPy as its ``xp``: the function of arrays that ``cupy.fuse`` traces
    (tests/cuda_compile.py traces and compiles it on a machine with no GPU)."""
    from cupyx.scipy.special import erf

    return functools.partial(math, _ArrayMath(cupy, erf))


def _compile(math: Callable):  # pragma: no cover - needs a GPU
    return backend.cupy.fuse(kernel_name=math.__name__)(on_cupy(math, backend.cupy))


# ------------------------------------------------------------------ many tensors, one launch
CHUNK = 1 << 13  # elements per thread block of a kernel's .each (a tensor spans ceil(n/CHUNK))
THREADS = 256  # threads per block: each thread takes every THREADS-th element of its chunk


def _rows_by_dtypes(name: str, lists: list[list]) -> tuple[dict[tuple, list[tuple]], list]:
    """The rows ``(arrays[0][i], arrays[1][i], ...)`` of contiguous device arrays grouped by
    their dtypes (one launch per group), and the rows with a strided array (a launch each).
    Every array of a row must be as large as the row's first: the table's kernel does not
    broadcast."""
    rows: dict[tuple, list[tuple]] = {}
    alone = []
    for i, row in enumerate(zip(*lists)):
        if any(a.size != row[0].size for a in row):
            shapes = [a.shape for a in row]
            raise ValueError(f"{name}.each: row {i} needs arrays of one size, not {shapes}")
        if all(a.flags.c_contiguous for a in row):
            rows.setdefault(tuple(a.dtype.str for a in row), []).append(row)
        else:
            alone.append(row)
    return rows, alone


def pointer_table(rows: list[tuple]) -> tuple[np.ndarray, int]:
    """The table a ``.each`` kernel reads, as int64, and its number of thread blocks.

    For tensors k = 0..K-1 with A arrays each: their addresses (K·A numbers, row by row), their
    sizes (K), then for each block b its tensor (B numbers) and its first element (B): block b
    covers elements [start, min(start + CHUNK, size)) of its tensor. Empty tensors get no block.
    """
    # all on the host (the table is copied to the device in one transfer afterwards)
    addresses = np.array([a.data.ptr for row in rows for a in row], np.int64)  # host: table
    sizes = np.array([row[0].size for row in rows], dtype=np.int64)  # host: table
    per_tensor = -(-sizes // CHUNK)  # blocks of each tensor: ceil(size / CHUNK)
    block_tensor = np.repeat(np.arange(len(rows)), per_tensor)  # host: table
    first_block = np.cumsum(per_tensor) - per_tensor  # host: each tensor's first block
    block_start = (np.arange(len(block_tensor)) - first_block[block_tensor]) * CHUNK  # host: table
    table = np.concatenate([addresses, sizes, block_tensor, block_start])  # host: table
    return table, len(block_tensor)


def each_source(elementwise, n_arrays: int) -> str:
    """The CUDA source of a ``.each`` kernel, from CuPy's ``ElementwiseKernel`` for the function
    (:func:`trace`): its first ``n_arrays`` parameters are bound to element ``i`` of this
    block's tensor through the table (:func:`pointer_table`), the rest are numbers by value."""
    from cupy._core import core

    params, binds = ["const long long* _table", "long long _tensors"], []
    for j, p in enumerate(elementwise.in_params):
        if j < n_arrays:
            const = "const " if p.is_const else ""
            binds.append(f"    {const}{p.ctype} &{p.name} = (({const}{p.ctype}*)_address[{j}])[i];")
        else:
            params.append(f"{p.ctype} {p.name}")
    headers = "".join(f"#include <{h}>\n" for h in core._cupy_header_list)
    return (
        f"{headers}{elementwise.preamble}\n"
        f'extern "C" __global__ void {elementwise.name}_each({", ".join(params)}) {{\n'
        f"  const long long* _size = _table + _tensors * {n_arrays};  // then blocks' k, start\n"
        "  const long long _k = _size[_tensors + blockIdx.x];\n"
        "  const long long _start = _size[_tensors + gridDim.x + blockIdx.x];\n"
        f"  const long long _end = _start + {CHUNK} < _size[_k] ? _start + {CHUNK} : _size[_k];\n"
        f"  const long long* _address = _table + _k * {n_arrays};\n"
        "  for (long long i = _start + threadIdx.x; i < _end; i += blockDim.x) {\n"
        + "\n".join(binds)
        + f"\n{elementwise.operation}\n  }}\n}}\n"
    )


def trace(math: Callable, args: tuple, name: str):
    """CuPy's ``ElementwiseKernel`` for ``math`` with CuPy as ``xp``, called with ``args``
    (CuPy arrays and numbers): what ``cupy.fuse`` builds on a first call. Tracing reads only the
    arrays' dtypes and numbers of axes (tests/cuda_compile.py traces on a machine without a
    GPU). Uses CuPy's fusion internals (``cupy._core.fusion``), which CuPy 14 has."""
    import cupy
    from cupy._core import fusion

    history = fusion._FusionHistory()
    fusion._thread_local.history, fusion._thread_local.is_old_fusing = history, True
    try:
        elementwise, _ = history.get_fusion(on_cupy(math, cupy), args, name)
    finally:
        fusion._thread_local.history, fusion._thread_local.is_old_fusing = None, False
    return elementwise


@functools.cache
def _each_kernel(math: Callable, dtypes: tuple, scalar_types: tuple):  # pragma: no cover - GPU
    """``launch(table, n_tensors, blocks, scalars)`` running ``math``'s ``.each`` kernel for rows
    of arrays of these dtypes (tests/fake_cupy.py puts an emulation of it in its place)."""
    cupy = backend.cupy
    args = tuple(cupy.empty(1, np.dtype(d)) for d in dtypes) + tuple(t(0) for t in scalar_types)
    elementwise = trace(math, args, math.__name__)
    if elementwise.out_params:
        raise TypeError(f"{math.__name__}.each needs a kernel that returns nothing")
    kernel = cupy.RawKernel(each_source(elementwise, len(dtypes)), f"{math.__name__}_each")
    kinds = [np.dtype(p.dtype).type for p in elementwise.in_params[len(dtypes) :]]

    def launch(table, n_tensors, blocks, scalars):
        values = tuple(kind(s) for kind, s in zip(kinds, scalars))
        kernel((blocks,), (THREADS,), (table, np.int64(n_tensors), *values))

    return launch
