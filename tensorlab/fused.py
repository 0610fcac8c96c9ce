"""Kernels written once, as Python functions of an array namespace, and run by every backend.

On a GPU every array operation is one kernel launch that reads its inputs from memory and
writes its output back. GELU's forward written as array operations is about twenty of them:
twenty launches, twenty trips through memory, where one kernel that keeps each number in a
register would do. ``cupy.fuse`` makes that one kernel from a Python function of arrays: it
traces the function once per signature (dtypes and numbers of axes) and compiles the traced
elementwise code.

:func:`fused` turns ``math(xp, *arrays)``, a function written with ``xp``'s operations, into
such a kernel::

    @fused
    def silu_kernel(xp, x):
        return x * (0.5 + 0.5 * xp.tanh(0.5 * x))

    silu_kernel(cupy_array)   # one compiled kernel (traced on the first call)
    silu_kernel(numpy_array)  # the same function, compiled into one C loop (or run by NumPy)

On NumPy arrays the same function is traced and compiled into one C loop over rows
(:mod:`tensorlab.c_runner`, where a C compiler works), or runs operation by operation
(:func:`run_numpy`, in blocks of whole rows for arrays larger than the cache). There is no
second, CPU form of any kernel: the tests check the arithmetic on NumPy, that the C run gives
NumPy's numbers, and on the emulated GPU (tests/fake_cupy.py) that the CuPy run does too.

A kernel may use arithmetic, comparisons, ufuncs and ``xp.where`` (``xp.erf`` too, which is
``cupyx.scipy.special.erf`` on the GPU and one formula per dtype on NumPy, ERF_BY_DTYPE), may
update its arguments in place (``m *= b``; it then returns nothing) and may return one array
or a tuple. Python scalars among the arguments keep the arrays' dtype, as they do in NumPy.

**Many tensors, one launch.** An optimizer updates every parameter tensor the same way; one
kernel per tensor is hundreds of launches per step (PyTorch's ``foreach`` and ``fused``
optimizers launch one kernel over lists of tensors for this reason). An in-place kernel's
:meth:`fused.each` takes lists: ``adam_kernel.each((ws, gs, ms, vs), b1, ...)`` is
``adam_kernel(ws[i], gs[i], ms[i], vs[i], b1, ...)`` for every ``i``. On NumPy it is one
call of the compiled C function over all of them (:func:`tensorlab.c_runner.run_each`), or
that loop where nothing is compiled. On a GPU it is one kernel, made from the same traced
function: the host writes a table (each tensor's addresses and size, and for each thread
block the tensor and the first element it covers: :data:`CHUNK` elements a block) and the
kernel's block reads its row of that table and runs the function's code on its elements.
The kernel is written once, as the function. :meth:`fused.each_sum` does the same for a
kernel that returns one value per element and sums them all, in float64 (clipping's sum of
squares of every gradient, PyTorch's ``_foreach_norm``): each block adds up its chunk and
writes one partial sum, and one reduction adds the partials.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from math import prod as math_prod

import numpy as np

from tensorlab import backend, c_runner, cuda_rows
from tensorlab.backend import BFLOAT16, erf_exact, xp_of

# ----------------------------------------------------------------------- the namespaces
# erf on NumPy, which has none. float64 (gradient checks, comparisons with PyTorch): exact to an
# ulp or two. float32: Abramowitz & Stegun (1964) 7.1.26, with t = 1/(1 + p|x|),
#     erf(x) ≈ sign(x) (1 - (a₁t + a₂t² + a₃t³ + a₄t⁴ + a₅t⁵) e^(-x²)),   |error| ≤ 1.5e-7
# in exact arithmetic. Evaluated in float32 it is up to 6.1e-7 (ten float32 steps at 1) near
# x = 0, where 1 - (...)e^(-x²) cancels: measured at 2M points of [-6, 6] against float64's erf
# (session 23; tests/nn/test_activation.py). GELU's Φ = ½(1 + erf) is within 3.1e-7. The
# formula is chosen once per dtype (ERF_BY_DTYPE).
_P = 0.3275911
_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf_float32(z):
    """Abramowitz & Stegun 7.1.26 on a NumPy array (|error| ≤ 6.1e-7 in float32: see above)."""
    a = np.abs(z)  # host: NumPy's erf
    t = 1.0 / (1.0 + _P * a)
    poly = _A[4] * t
    for c in _A[3::-1]:  # Horner: ((a₅t + a₄)t + a₃)t ...
        poly += c
        poly *= t
    r = np.asarray(1.0 - poly * np.exp(-(a * a)))  # host: erf(|z|) ≥ 0; then z's sign bit
    r.view(np.uint32)[...] |= z.view(np.uint32) & 0x80000000  # on it (np.copysign: 5x slower)
    return r


ERF_BY_DTYPE = {np.dtype(np.float64): erf_exact, np.dtype(np.float32): erf_float32}
HALF = {np.dtype(np.float16)} | ({np.dtype(BFLOAT16)} if BFLOAT16 is not None else set())


def _erf_numpy(z):
    return ERF_BY_DTYPE[z.dtype](z)


class _ArrayMath:
    """The ``xp`` a kernel is written against: an array module's functions, plus ``erf``, with
    sums and means over the last axis (x·1) and sums of a matrix's rows (1ᵀx, a bias's
    gradient) taken as matrix-vector products. BLAS streams through the rows at memory speed
    where NumPy's reduction pays a fixed cost per short row (a mean over the last axis of
    (768, 512) float32: 2.6x slower, ``bench_kernels.py``, session 22), and float16 and
    bfloat16 are summed in float32 (``backend.matmul``); the GPU sums the same way, so both
    give the same numbers. Any other sum or mean is the module's own."""

    def __init__(self, module, erf):
        self._module, self.erf = module, erf
        self._ones: dict = {}

    def __getattr__(self, name):
        return getattr(self._module, name)

    def _gemv(self, x, axis, dtype=None):
        """Σ over ``axis`` (-1, or 0 of a matrix) as a product with a vector of ones, or None
        where the module's own sum is the one to take; a half x's sums (taken in float32)
        rounded into ``dtype`` (default x's)."""
        if x.dtype not in _BY_GEMV or x.ndim == 0 or 0 in x.shape:
            return None
        if axis == 0 and x.ndim == 2:
            return backend.matmul(self._ones_of(x, x.shape[0]), x, dtype=dtype)
        if axis == -1 or axis == x.ndim - 1:
            ones = self._ones_of(x, x.shape[-1])
            rows = backend.matmul(x.reshape(-1, x.shape[-1]), ones, dtype=dtype)
            return rows.reshape(x.shape[:-1])
        return None

    def _ones_of(self, x, n):
        ones = self._ones.get((x.dtype, n))
        if ones is None:  # made once per dtype and length, then reused (the products only read)
            ones = self._ones[x.dtype, n] = self._module.ones(n, x.dtype)
        return ones

    def sum(self, x, axis=None, keepdims=False, dtype=None, **kw):
        """The module's sum (``dtype``: the result's), by a gemv where that sums as it would:
        in x's own dtype, or a half x in float32 (the gemv's sums always are)."""
        to = x.dtype if dtype is None else np.dtype(dtype)
        gemv = not kw and (to == x.dtype or (x.dtype in HALF and to == np.float32))
        total = self._gemv(x, axis, to) if gemv else None
        if total is None:
            return self._module.sum(x, axis=axis, keepdims=keepdims, dtype=dtype, **kw)
        return self._module.expand_dims(total, axis) if keepdims else total

    def mean(self, x, axis=None, keepdims=False, **kw):
        total = None if kw else self._gemv(x, axis)
        if total is None:
            return self._module.mean(x, axis=axis, keepdims=keepdims, **kw)
        total = total * (1.0 / x.shape[axis])
        return self._module.expand_dims(total, axis) if keepdims else total


_BY_GEMV = {np.dtype(np.float32), np.dtype(np.float64)} | HALF
NUMPY = _ArrayMath(np, _erf_numpy)
_NAMESPACES: dict = {np: NUMPY}


def array_math(a) -> _ArrayMath:
    """The ``xp`` of kernels for ``a``'s array module: :data:`NUMPY`, or CuPy's (made once)."""
    return _namespace(xp_of(a))


def _namespace(module) -> _ArrayMath:
    space = _NAMESPACES.get(module)
    if space is None:  # CuPy's, on first use (CuPy brings its own erf)
        from cupyx.scipy.special import erf

        space = _NAMESPACES[module] = _ArrayMath(module, erf)
    return space


# ------------------------------------------------------------------ the NumPy runner
# A formula runs as written, one NumPy operation after another, each a pass over the block.
# Arrays larger than BLOCK numbers are cut into blocks of whole rows, so a formula's temporaries
# stay near the size of the cache and every block reuses the same memory. Measured on this
# project's 2-core machine (session 21, forward + backward of F.gelu and F.silu timed with BLOCK
# set by hand; no script kept): at the GPT's shapes (up to
# 768 x 512 float32, 1.5 MB) blocks of 16k-64k numbers were 10-60% slower than the whole array
# (the per-call cost of each ufunc, paid once per block, outweighs the cache), and two threads
# over the blocks were slower than one (each ufunc call holds the GIL while it is set up).
# So arrays up to 4 MB run whole, larger ones (a GPU-sized batch on the CPU) in 4 MB blocks,
# one after another.
BLOCK = 1 << 20  # numbers per block


def _largest(arrays, widen: bool) -> tuple:
    """(the array that sets a kernel's shape: the largest, a float16/bfloat16 one first
    among those as large; with ``widen``, the half dtype the kernel's outputs of its shape
    are rounded back to, or None). The half one first: cross-entropy's backward reads the
    float32 softmax it saved beside the bfloat16 logits whose gradient it returns."""
    ref = max(arrays, key=lambda a: (a.size, a.dtype in HALF))
    return ref, ref.dtype if widen and ref.dtype in HALF else None


def _widened(a):
    """float16 and bfloat16 arrays in float32 (the kernels compute half inputs in float32)."""
    return a.astype(np.float32) if getattr(a, "dtype", None) in HALF else a


def _same(a):
    return a


def _rounded(a, half, shape=None):
    """A float32 result back in the half dtype its input had, if it has the input's ``shape``
    (None: any). A kernel's own wider output (a float64 sum of squares) and one number per row
    (a loss) stay as they are."""
    if half is None or a.dtype != np.float32 or (shape is not None and a.shape != shape):
        return a
    return a.astype(half)


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def run_numpy(math: Callable, rows: bool, widen: bool, args: tuple, kw: dict, keep: int = 0):
    """``math(NUMPY, *args, **kw)`` block by block. The largest array argument sets the shape:
    the arrays of its shape are cut into blocks of about :data:`BLOCK` numbers (whole rows of
    the last axis when ``rows``: a kernel that reduces over the last axis sees whole rows, and
    the arrays of one number per row, such as class targets, are cut with them); the other
    arguments are passed whole. Each output has the blocks' leading shape. With ``widen``,
    half inputs are computed in float32, and the outputs of the input's shape are rounded back
    to its dtype, in the same call (one number per row, such as a loss, stays float32, and so
    do the last ``keep`` outputs: what a forward saves for its backward)."""
    host = np.asarray  # host: the NumPy runner's arrays are NumPy's
    args = tuple(host(a) if isinstance(a, np.generic) else a for a in args)
    ref, half = _largest([a for a in args if isinstance(a, np.ndarray)], widen)
    widened = _widened if half is not None else _same
    shape = ref.shape
    width = shape[-1] if rows and ref.ndim else 1
    lead = shape[:-1] if rows and ref.ndim else shape
    cut = [
        isinstance(a, np.ndarray) and (a.shape == shape or (rows and a.shape == lead)) for a in args
    ]
    blockable = (
        ref.size > BLOCK
        and width > 0
        and all(a.flags.c_contiguous for a, c in zip(args, cut) if c)
        and not any(
            isinstance(a, np.ndarray) and a.ndim >= ref.ndim and not c for a, c in zip(args, cut)
        )  # a broadcast partner: run whole
    )
    if not blockable:
        out = math(NUMPY, *[widened(a) for a in args], **kw)
        if out is None:
            return None
        outs = _as_tuple(out)
        outs = tuple(
            _rounded(host(o), half if i < len(outs) - keep else None, shape)
            for i, o in enumerate(outs)
        )
        return outs if isinstance(out, tuple) else outs[0]
    n = ref.size // width
    step = max(1, BLOCK // width)
    flat = [
        (a.reshape(n, width) if a.shape == shape else a.reshape(n)) if c else a
        for a, c in zip(args, cut)
    ]
    spans = [slice(i, i + step) for i in range(0, n, step)]

    def block(s):
        return math(NUMPY, *[widened(a[s]) if c else a for a, c in zip(flat, cut)], **kw)

    first = block(spans[0])
    if first is None:  # an in-place kernel: it wrote into the blocks, which are views
        for s in spans[1:]:
            block(s)
        return None
    outs = []
    firsts = _as_tuple(first)
    for i, o in enumerate(firsts):
        full = (*lead, *o.shape[1:]) if rows else shape
        rounds = half is not None and o.dtype == np.float32 and full == shape
        rounds = rounds and i < len(firsts) - keep
        dtype = half if rounds else o.dtype
        outs.append(np.empty((n, *o.shape[1:]), dtype))  # host: the NumPy runner

    def write(s, result):
        for o, r in zip(outs, _as_tuple(result)):
            o[s] = r

    write(spans[0], first)
    for s in spans[1:]:
        write(s, block(s))
    outs = [o.reshape(*lead, *o.shape[1:]) if rows else o.reshape(shape) for o in outs]
    return tuple(outs) if isinstance(first, tuple) else outs[0]


KERNELS: list = []  # every kernel made (the tests run each on every runner)


class fused:  # noqa: N801 - used as a decorator, like functools.cache
    """A kernel from ``math(xp, *args)``: compiled by ``cupy.fuse`` for CuPy arrays (once per
    signature, on first use); on NumPy arrays compiled into C (:mod:`tensorlab.c_runner`, once
    per signature) or, where that is off or the formula cannot be written in C, run by
    :func:`run_numpy` (block by block).
    ``kernel.math`` is the function. ``@fused(rows=True)`` for a kernel that reduces over the
    last axis (its NumPy blocks are whole rows). ``widen=True`` computes float16 and bfloat16
    inputs in float32 and rounds float32 outputs back (the fused ops' kernels), but for the
    last ``keep`` outputs (what a forward saves for its backward stays float32); without it the
    arrays go in as they are (an in-place kernel must update the caller's arrays)."""

    def __new__(
        cls, math: Callable | None = None, *, rows: bool = False, widen: bool = False, keep=0
    ):
        if math is None:  # @fused(rows=True)
            return lambda m: cls(m, rows=rows, widen=widen, keep=keep)
        return super().__new__(cls)

    def __init__(self, math: Callable, *, rows: bool = False, widen: bool = False, keep=0):
        functools.update_wrapper(self, math)
        self.math, self.rows, self.widen, self.keep = math, rows, widen, keep
        self._signature = inspect.signature(math)
        self._compiled = None
        self._c_traces: dict = {}  # the C runner's traces, by signature
        self._c_plans: dict = {}  # and what it needs per shape (tensorlab/c_runner.py: run)
        self._c_each: dict = {}  # and the traces of .each, by dtypes (c_runner.run_each)
        KERNELS.append(self)

    def __call__(self, *args, **kw):
        if xp_of(args[0]) is not np:
            return self._on_gpu(args, kw)  # pragma: no cover
        if c_runner.available():
            out = self._on_cpu(args, kw)
            if out is not c_runner.NOT_COMPILED:
                return out
        return run_numpy(self.math, self.rows, self.widen, args, kw, self.keep)

    def _on_cpu(self, args, kw):
        """The C runner (tensorlab/c_runner.py), half inputs computed in float32 and rounded
        back as :func:`run_numpy` does."""
        if not any(isinstance(a, np.generic) or getattr(a, "dtype", None) in HALF for a in args):
            return c_runner.run(self, args, kw)  # float32, float64, integers
        args = tuple(np.asarray(a) if isinstance(a, np.generic) else a for a in args)  # host: CPU
        ref, half = _largest([a for a in args if isinstance(a, np.ndarray)], self.widen)
        if self.widen:  # (a half input beside float32 ones too: C has no half arithmetic)
            args = tuple(_widened(a) for a in args)
        out = c_runner.run(self, args, kw)
        if out is c_runner.NOT_COMPILED:
            return out
        return self._rounded_back(out, half, ref.shape)

    def _rounded_back(self, out, half, shape):
        """The outputs of ``shape`` back in the ``half`` dtype of the inputs (None: as they
        are), but for the last ``keep`` (what a forward saves stays float32)."""
        if half is None or out is None:
            return out
        if isinstance(out, tuple):
            n = len(out) - self.keep
            return tuple(_rounded(o, half if i < n else None, shape) for i, o in enumerate(out))
        return _rounded(out, half, shape)

    def _on_gpu(self, args, kw):  # pragma: no cover - needs a GPU
        """The compiled kernel. Half inputs are computed in float32 and rounded back by the
        kernel itself as it reads and writes them: an elementwise kernel by the half runner
        (:func:`half_source`), a row kernel by its CUDA form (:func:`cuda_rows.run_cuda`), one
        launch each. A row kernel that cannot be written so runs as CuPy's operations, one
        launch each (cupy.fuse cannot fuse work that follows a reduction), with a cast on
        either side."""
        if kw and not self.rows:  # the compiled kernels take positional arguments only
            bound = self._signature.bind(None, *args, **kw)
            bound.apply_defaults()
            args, kw = bound.args[1:], {}
        ref, half = _largest([a for a in args if hasattr(a, "dtype")], self.widen)
        if half is not None and not self.rows:
            return _run_half(self, args, half, ref.shape)
        if self.rows:  # the row program as one CUDA kernel, half arrays read and written in it
            out = cuda_rows.run_cuda(self, args, kw, half)  # (tensorlab/cuda_rows.py)
            if out is not c_runner.NOT_COMPILED:
                return out
        if self._compiled is None:
            self._compiled = (
                on_cupy(self.math, backend.cupy)
                if self.rows
                else _compile(self.math, self.__name__)
            )
        if half is not None:
            args = tuple(_widened(a) for a in args)
        return self._rounded_back(self._compiled(*args, **kw), half, ref.shape)

    def each(self, arrays: Sequence[Sequence], *scalars) -> None:
        """The kernel on many tensors: ``arrays`` holds one list per array argument, and
        ``kernel(arrays[0][i], arrays[1][i], ..., *scalars)`` runs for every ``i``, in place
        (the kernel must return nothing). On a GPU, one launch for all rows of contiguous
        arrays of the same dtypes (see the module docstring); a row with a strided array runs
        as its own launch of the kernel. On NumPy, one compiled call for all rows of the same
        dtypes (where the C runner works), else a loop."""
        method = f"{self.__name__}.each"
        rows = _rows(method, arrays)
        if not rows:
            return
        if xp_of(rows[0][0]) is np:  # compiled, one call per dtypes; else row by row, as written
            by_dtypes, alone = _rows_by_dtypes(method, rows) if c_runner.available() else ({}, rows)
            for same in by_dtypes.values():
                if not c_runner.run_each(self, same, scalars):
                    alone += same
            for row in alone:
                if self.math(NUMPY, *row, *scalars) is not None:
                    raise TypeError(f"{method} needs a kernel that returns nothing")
            return
        by_dtypes, alone = _rows_by_dtypes(method, rows)
        for dtypes, same in by_dtypes.items():
            table, blocks = pointer_table(same)
            if not blocks:  # only empty tensors: nothing to do (CUDA refuses an empty grid)
                continue
            launch = _each_kernel(self.math, dtypes, tuple(type(s) for s in scalars), False)
            launch(xp_of(same[0][0]).asarray(table), len(same), blocks, scalars)
        for row in alone:
            if self(*row, *scalars) is not None:
                raise TypeError(f"{method} needs a kernel that returns nothing")

    def each_sum(self, arrays: Sequence[Sequence], *scalars):
        """Σ_i Σ_j kernel(arrays[0][i], arrays[1][i], ..., *scalars)[j], summed in float64, as
        a 0-d array on the arrays' device: the kernel on many tensors, as :meth:`each`, for a
        kernel that returns one array and leaves its arguments alone. On a GPU, one launch for
        all rows of contiguous arrays of the same dtypes, and one sum of its blocks' partial
        sums; on NumPy, one compiled call for all rows of the same dtypes (where the C runner
        works), else the kernel on each row in turn."""
        method = f"{self.__name__}.each_sum"
        rows = _rows(method, arrays)
        if not rows:
            raise ValueError(f"{method}: no arrays to sum over")
        xp, total = xp_of(rows[0][0]), None
        on_cpu = xp is np
        if on_cpu and not c_runner.available():
            by_dtypes, alone = {}, rows
        else:
            by_dtypes, alone = _rows_by_dtypes(method, rows)
        for dtypes, same in by_dtypes.items():
            if on_cpu:  # one compiled call
                value = c_runner.run_each_sum(self, same, scalars)
                if value is None:
                    alone += same
                else:
                    total = _plus(total, np.float64(value))
                continue
            table, blocks = pointer_table(same)
            if not blocks:  # only empty tensors: they add nothing
                continue
            partial = xp.empty(blocks, np.float64)  # one sum per thread block
            launch = _each_kernel(self.math, dtypes, tuple(type(s) for s in scalars), True)
            launch(xp.asarray(table), len(same), blocks, scalars, partial)
            total = _plus(total, partial.sum())
        for row in alone:
            value = self.math(NUMPY, *row, *scalars) if xp is np else self(*row, *scalars)
            if not hasattr(value, "dtype"):
                raise TypeError(f"{method} needs a kernel that returns one array")
            total = _plus(total, value.sum(dtype=np.float64))
        return xp.zeros((), np.float64) if total is None else total


def _rows(method: str, arrays: Sequence[Sequence]) -> list[tuple]:
    """``arrays`` (one list per array argument) as rows ``(arrays[0][i], arrays[1][i], ...)``;
    the lists must be of one length."""
    lists = [list(a) for a in arrays]
    if any(len(a) != len(lists[0]) for a in lists):
        raise ValueError(f"{method}: the lists differ in length: {[len(a) for a in lists]}")
    return list(zip(*lists))


def _plus(total, value):
    """total + value, where a total of None is nothing yet (no 0.0 + on the host: on a GPU the
    sum stays on the device)."""
    return value if total is None else total + value


def on_cupy(math: Callable, cupy) -> Callable:
    """``math`` with CuPy as its ``xp``: the function of arrays that ``cupy.fuse`` traces
    (tests/cuda_compile.py traces and compiles it on a machine with no GPU)."""
    return functools.partial(math, _namespace(cupy))


def _compile(math: Callable, name: str):  # pragma: no cover - needs a GPU
    return backend.cupy.fuse(kernel_name=name)(on_cupy(math, backend.cupy))


# ------------------------------------------------------------------ half arrays, one launch
# cupy.fuse compiles a kernel for the dtypes it is called with, but has no bfloat16 ``astype``
# (its table of casts lists NumPy's own types), so a kernel cannot widen its half inputs
# itself there. The half runner compiles the kernel's float32 operation, as cupy.fuse traces
# it, into a loop of its own that converts in registers: each half input read as float, each
# float32 output (but the last ``keep``: what a forward saves) rounded to the half type as it
# is written. One launch, where widening and rounding outside the kernel were one launch per
# half input and per output more.


def half_dtypes(out_dtypes: Sequence, half, keep: int, rounds: bool = True) -> list:
    """The dtypes a kernel's outputs are written in on half inputs: float32 ones in ``half``,
    but the last ``keep`` (and none when not ``rounds``: no output has the inputs' shape)."""
    n = len(out_dtypes) - keep
    return [
        half if rounds and i < n and np.dtype(d) == np.float32 else np.dtype(d)
        for i, d in enumerate(out_dtypes)
    ]


def _run_half(kernel: fused, args: tuple, half, ref_shape: tuple):
    """``kernel`` on CuPy arguments with half arrays among them, as one launch (see above):
    every array brought to the arguments' broadcast shape as a contiguous array (a copy only
    for one that is not already), then the half runner's kernel."""
    cupy = backend.cupy
    shape = np.broadcast_shapes(*(a.shape for a in args if hasattr(a, "dtype")))
    args = tuple(
        a
        if not hasattr(a, "dtype") or (a.shape == shape and a.flags.c_contiguous)
        else cupy.ascontiguousarray(cupy.broadcast_to(a, shape))
        for a in args
    )
    kinds = tuple(a.dtype if hasattr(a, "dtype") else type(a) for a in args)
    rounds = shape == ref_shape
    launch = _half_kernel(kernel.math, kernel.__name__, kinds, half, kernel.keep, rounds)
    return launch(args, shape)


def half_source(elementwise, kinds: tuple, out_dtypes: list) -> str:
    """The CUDA source of a kernel's half runner: ``elementwise`` is CuPy's trace of it on
    float32 arrays in place of the half ones (:func:`trace`); ``kinds`` are the arguments'
    dtypes (arrays) or Python types (numbers, passed by value); the outputs are written in
    ``out_dtypes``. A grid-stride loop over the elements binds each input as a local variable
    (a half one converted to float), runs the traced operation, and writes each output
    converted to its dtype."""
    from cupy._core import _scalar, core

    types: set = set()  # the headers of the types used (CuPy's float16 and bfloat16 classes)
    params, binds, writes = [], [], []
    for p, kind in zip(elementwise.in_params, kinds):
        if not p.is_const:
            raise TypeError(f"{elementwise.name}: the half runner cannot update {p.name} in place")
        if isinstance(kind, np.dtype):
            params.append(f"const {_scalar.get_typename(kind, types)}* _in_{p.name}")
            binds.append(f"    const {p.ctype} {p.name} = ({p.ctype})_in_{p.name}[i];")
        else:
            params.append(f"{p.ctype} {p.name}")
    for p, dtype in zip(elementwise.out_params, out_dtypes):
        ctype = _scalar.get_typename(np.dtype(dtype), types)
        params.append(f"{ctype}* _out_{p.name}")
        binds.append(f"    {p.ctype} {p.name};")
        writes.append(f"    _out_{p.name}[i] = ({ctype}){p.name};")
    headers = "".join(f"#include <{h}>\n" for h in core._cupy_header_list)
    headers += _scalar.format_type_decls(types)  # (the half types' headers)
    return (
        f"{headers}{elementwise.preamble}\n"
        f'extern "C" __global__ void {elementwise.name}_half({", ".join(params)}, long long n) '
        "{\n"
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
        "       i += (long long)blockDim.x * gridDim.x) {\n"
        + "\n".join(binds)
        + f"\n{elementwise.operation}\n"
        + "\n".join(writes)
        + "\n  }\n}\n"
    )


@functools.cache
def _half_kernel(
    math: Callable, name: str, kinds: tuple, half, keep: int, rounds: bool
):  # pragma: no cover
    """``launch(args, shape)`` running ``math``'s half kernel for arguments of these ``kinds``
    (contiguous arrays of ``shape``, and numbers), returning its outputs (a tuple for more
    than one). Traced on float32 in place of the half dtypes, compiled once per signature
    (tests/fake_cupy.py puts an emulation of it in its place)."""
    cupy = backend.cupy
    wide = tuple(
        cupy.empty(1, np.float32 if kind in HALF else kind)
        if isinstance(kind, np.dtype)
        else kind(0)
        for kind in kinds
    )
    elementwise = trace(math, wide, name)
    outs = half_dtypes([p.dtype for p in elementwise.out_params], half, keep, rounds)
    kernel = cupy.RawKernel(half_source(elementwise, kinds, outs), f"{name}_half")
    numbers = {
        i: np.dtype(p.dtype).type
        for i, (p, kind) in enumerate(zip(elementwise.in_params, kinds))
        if not isinstance(kind, np.dtype)
    }

    def launch(args, shape):
        results = [cupy.empty(shape, dtype) for dtype in outs]
        n = math_prod(shape)
        if n:
            values = tuple(numbers[i](a) if i in numbers else a for i, a in enumerate(args))
            blocks = min(-(-n // THREADS), 65535)
            kernel((blocks,), (THREADS,), (*values, *results, np.int64(n)))
        return tuple(results) if len(results) > 1 else results[0]

    return launch


# ------------------------------------------------------------------ many tensors, one launch
CHUNK = 1 << 13  # elements per thread block of a kernel's .each (a tensor spans ceil(n/CHUNK))
THREADS = 256  # threads per block: each thread takes every THREADS-th element of its chunk


def _rows_by_dtypes(method: str, rows: list[tuple]) -> tuple[dict[tuple, list[tuple]], list]:
    """The rows of contiguous device arrays grouped by their dtypes (one launch per group), and
    the rows with a strided array (a launch each). Every array of a row must be as large as the
    row's first: the table's kernel does not broadcast."""
    by_dtypes: dict[tuple, list[tuple]] = {}
    alone = []
    for i, row in enumerate(rows):
        if any(a.size != row[0].size for a in row):
            shapes = [a.shape for a in row]
            raise ValueError(f"{method}: row {i} needs arrays of one size, not {shapes}")
        if all(a.flags.c_contiguous for a in row):  # by dtype, not .str ("<V2" for bfloat16)
            by_dtypes.setdefault(tuple(a.dtype for a in row), []).append(row)
        else:
            alone.append(row)
    return by_dtypes, alone


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


def each_source(elementwise, n_arrays: int, total: bool = False) -> str:
    """The CUDA source of a ``.each`` kernel, from CuPy's ``ElementwiseKernel`` for the function
    (:func:`trace`): its first ``n_arrays`` parameters are bound to element ``i`` of this
    block's tensor through the table (:func:`pointer_table`), the rest are numbers by value.

    With ``total``, the source of ``.each_sum``: the function's one output is a local variable,
    each thread adds its elements' values in a double, the block adds its threads' sums (a tree
    in shared memory, always in the same order) and writes it to ``_partial[blockIdx.x]``."""
    from cupy._core import _scalar, core

    params, binds = ["const long long* _table", "long long _tensors"], []
    if total:
        params.append("double* _partial")
        binds += [f"    {p.ctype} {p.name};" for p in elementwise.out_params]
    for j, p in enumerate(elementwise.in_params):
        if j < n_arrays:
            const = "const " if p.is_const else ""
            binds.append(f"    {const}{p.ctype} &{p.name} = (({const}{p.ctype}*)_address[{j}])[i];")
        else:
            params.append(f"{p.ctype} {p.name}")
    headers = "".join(f"#include <{h}>\n" for h in core._cupy_header_list)
    types: set = set()  # the headers of the types CuPy's own kernels include as needed (bfloat16)
    for p in (*elementwise.in_params, *elementwise.out_params):
        _scalar.get_typename(p.dtype, types)
    headers += _scalar.format_type_decls(types)
    source = (
        f"{headers}{elementwise.preamble}\n"
        f'extern "C" __global__ void {elementwise.name}_each({", ".join(params)}) {{\n'
        f"  const long long* _size = _table + _tensors * {n_arrays};  // then blocks' k, start\n"
        "  const long long _k = _size[_tensors + blockIdx.x];\n"
        "  const long long _start = _size[_tensors + gridDim.x + blockIdx.x];\n"
        f"  const long long _end = _start + {CHUNK} < _size[_k] ? _start + {CHUNK} : _size[_k];\n"
        f"  const long long* _address = _table + _k * {n_arrays};\n"
        + ("  double _sum = 0;\n" if total else "")
        + "  for (long long i = _start + threadIdx.x; i < _end; i += blockDim.x) {\n"
        + "\n".join(binds)
        + f"\n{elementwise.operation}\n"
    )
    if not total:
        return source + "  }\n}\n"
    (out,) = elementwise.out_params
    return source + (
        f"    _sum += (double){out.name};\n  }}\n"
        f"  __shared__ double _sums[{THREADS}];\n"
        "  _sums[threadIdx.x] = _sum;\n"
        "  __syncthreads();\n"
        f"  for (int s = {THREADS // 2}; s > 0; s >>= 1) {{\n"
        "    if (threadIdx.x < s) _sums[threadIdx.x] += _sums[threadIdx.x + s];\n"
        "    __syncthreads();\n"
        "  }\n"
        "  if (threadIdx.x == 0) _partial[blockIdx.x] = _sums[0];\n}\n"
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
def _each_kernel(math: Callable, dtypes: tuple, scalars: tuple, total: bool):  # pragma: no cover
    """``launch(table, n_tensors, blocks, scalars, partial=None)`` running ``math``'s ``.each``
    kernel (``total``: its ``.each_sum`` kernel, writing each block's sum into ``partial``) for
    rows of arrays of these dtypes (tests/fake_cupy.py puts an emulation of it in its place)."""
    cupy = backend.cupy
    args = tuple(cupy.empty(1, np.dtype(d)) for d in dtypes) + tuple(t(0) for t in scalars)
    elementwise = trace(math, args, math.__name__)
    if total and len(elementwise.out_params) != 1:
        raise TypeError(f"{math.__name__}.each_sum needs a kernel that returns one array")
    if not total and elementwise.out_params:
        raise TypeError(f"{math.__name__}.each needs a kernel that returns nothing")
    source = each_source(elementwise, len(dtypes), total)
    kernel = cupy.RawKernel(source, f"{math.__name__}_each")
    kinds = [np.dtype(p.dtype).type for p in elementwise.in_params[len(dtypes) :]]

    def launch(table, n_tensors, blocks, scalars, partial=None):
        values = tuple(kind(s) for kind, s in zip(kinds, scalars))
        head = (table, np.int64(n_tensors)) + ((partial,) if total else ())
        kernel((blocks,), (THREADS,), (*head, *values))

    return launch
