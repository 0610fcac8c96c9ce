"""CuPy emulated on the CPU: NumPy does the arithmetic, CuPy's rules decide what is allowed.

No GPU has run this project's tests so far, so every ``xp is not np`` branch (the fused
kernels, the fused AdamW, the GPU embedding backward, the generator state) and every way a
host array can slip into device code went unexercised. ``TENSORLAB_TEST_DEVICE=fake-cuda
pytest`` runs the suite with this module standing in for CuPy and "cuda" as the default
device. It keeps these rules of CuPy's, each one a way code that passes on NumPy fails on a GPU:

- A device array is not a NumPy array: ``np.asarray(a)`` raises (CuPy's ``__array__`` refuses
  implicit transfers; ``a.get()`` and ``cupy.asnumpy(a)`` are the explicit ones), a NumPy
  array given where a device array is expected raises (``cupy.add(d, h)``, ``d + h``), and a
  device array cannot be used as a Python index (CuPy's arrays have no ``__index__``).
- Reductions and indexing return 0-d device arrays, not NumPy scalars.
- Only CuPy's functions, with CuPy's parameters, exist (tests/cupy_api.json: a call with a
  NumPy-only keyword raises TypeError, as CuPy does); ufuncs take only out/dtype/casting.
- ``random.default_rng`` gives a generator laid out as CuPy's: its state is the device array
  ``bit_generator._state`` and ``bit_generator.state`` is a method.
- ``d[key] = value`` takes a host value only as a scalar: a NumPy array or a list is refused
  (``Tensor.copy_`` moves host values over); an operand that is neither an array nor a number
  gets ``NotImplemented`` (so ``d == pytest.approx(x)`` fails as on CuPy: compare ``float(d)``).
- CuPy 14.2's bfloat16 gaps, each seen on a GPU: ``add.at`` and ``sort``/``argsort`` refuse
  it, and ``where``, ``tril`` and ``triu`` return float32 for it.
- A bfloat16 matrix product with more than two axes is refused: CuPy 14 sends it to a kernel
  that sums in bfloat16 (see ``_refuse_batched_bfloat16``); two-axis products go to cuBLAS.
- ``fuse`` returns the function (CuPy compiles it; the arithmetic is the same), and
  ``cupyx.scipy.special.erf`` is an elementwise erf. A kernel's ``.each`` and ``.each_sum``
  (many tensors, one launch: tensorlab/fused.py) read their table of addresses as the CUDA
  code does and run the function on the memory at those addresses.
- ``RawModule`` (hand-written CUDA, nn/flash_attention.cu) compiles its source with g++ and
  runs every thread of every block on the CPU (tests/cuda_emulator.py); where g++ is missing,
  a test that launches such a kernel skips.

It cannot show what only a GPU shows: speed, float32 rounding of other summation orders,
kernel compilation errors (tests/cuda_compile.py compiles the kernels with NVRTC), memory
limits. ``install()`` puts it in place (tests/conftest.py).
"""

from __future__ import annotations

import collections
import ctypes
import functools
import operator
import os
import sys
import types
import weakref

import numpy as np

from tensorlab.backend import BFLOAT16
from tests import cupy_api

TABLE = cupy_api.load()
# Every read of a device value by the host (bool(), float(), .item(), .get(), asnumpy, ...) is
# a synchronisation on a GPU: the host waits for the queued kernels. Counted here, by kind.
SYNCS: dict[str, int] = {}


def _sync(kind: str) -> None:
    SYNCS[kind] = SYNCS.get(kind, 0) + 1


# Every array operation is a kernel launch on a GPU (a view is not; a fused kernel is one).
# Counted here by operation: what a GPU step costs in launches, which a CPU cannot time.
KERNELS: collections.Counter = collections.Counter()
_FUSING = [0]  # > 0 inside a fused kernel, whose operations are one launch


def _kernel(name: str) -> None:
    if not _FUSING[0]:
        KERNELS[name] += 1


_TRANSFERS = {"array", "asarray", "asanyarray", "ascontiguousarray"}  # may take host data
# operations that make views (no kernel) or only allocate (empty: no kernel either)
_VIEWS = {
    "reshape",
    "view",
    "transpose",
    "swapaxes",
    "squeeze",
    "ravel",
    "broadcast_to",
    "expand_dims",
    "empty",
    "empty_like",
    "get",
}


class ndarray:  # noqa: N801 - CuPy's name
    """A device array: a NumPy array ``_a`` that only CuPy's interface reaches."""

    __slots__ = ("_a", "__weakref__")

    def __init__(self, a: np.ndarray):
        self._a = a

    # ---------------------------------------------------------------- what CuPy refuses
    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly."
        )

    def get(self, stream=None, order="C", out=None, blocking=True):
        _sync("get")
        return self._a.copy()

    # ---------------------------------------------------------------- attributes
    # CuPy's arrays have these (tests/cupy_api.json: ndarray_attributes), NumPy's too; ``base``
    # is the device array a view was made from (the same object, as in CuPy: the engine tells
    # views from copies by it). ``data`` is only its ``ptr``, the address of the first element
    # (the memory NumPy holds; a ``.each`` kernel's table carries it). ``device``, ``cstruct``,
    # ``flat`` are not emulated.
    data = property(lambda self: types.SimpleNamespace(ptr=self._a.__array_interface__["data"][0]))
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: _wrap(self._a.T))
    mT = property(lambda self: _wrap(self._a.mT))
    real = property(lambda self: _wrap(self._a.real))
    imag = property(lambda self: _wrap(self._a.imag))
    base = property(lambda self: None if self._a.base is None else _wrap(self._a.base))

    def __getattr__(self, name):
        entry = TABLE["ndarray_methods"].get(name, False)
        if entry is False or name.startswith("_"):
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r}")
        method = getattr(self._a, name)
        if name in ("item", "tolist", "tobytes"):
            _sync(name)

        def call(*args, **kwargs):
            _check_arguments(f"ndarray.{name}", entry, args, kwargs)
            out = method(*_unwrap(args), **_unwrap(kwargs))
            if out is self._a:  # astype(own dtype, copy=False): the array itself, no kernel
                return self
            if name not in _VIEWS:
                _kernel(f"ndarray.{name}")
            return _wrap(out)

        return call

    # ---------------------------------------------------------------- Python protocols
    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (_wrap(row) for row in self._a)

    def __bool__(self):
        _sync("bool")
        return bool(self._a)

    def __float__(self):
        _sync("float")
        return float(self._a)

    def __int__(self):
        _sync("int")
        return int(self._a)

    def __complex__(self):
        _sync("complex")
        return complex(self._a)

    def __format__(self, spec):
        _sync("format")
        return format(self._a.item() if self._a.ndim == 0 else self._a, spec)

    def __repr__(self):
        return repr(self._a).replace("array(", "fake_cupy.array(", 1)

    __hash__ = None

    def __getitem__(self, key):
        out = self._a[_unwrap(key, host_ok=True)]
        if not (isinstance(out, np.ndarray) and np.shares_memory(out, self._a)):
            _kernel("getitem (gather)")  # (a slice is a view, an index array a kernel)
        return _wrap(out)

    def __setitem__(self, key, value):
        # CuPy 14.2 takes a host value only as a scalar (a list becomes a NumPy array first)
        if isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.ndim):
            raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
        _kernel("setitem")
        self._a[_unwrap(key, host_ok=True)] = _unwrap(value, host_ok=True)

    # NumPy's ufuncs and functions applied to device arrays dispatch to CuPy's, as CuPy's
    # __array_ufunc__ and __array_function__ do; a host array among the inputs is refused.
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        fake = _UFUNCS.get(ufunc.__name__)
        if fake is None:
            return NotImplemented
        return (
            getattr(fake, method)(*inputs, **kwargs)
            if method != "__call__"
            else fake(*inputs, **kwargs)
        )

    def __array_function__(self, func, types, args, kwargs):
        namespace = module
        for part in func.__module__.split(".")[1:]:  # numpy.linalg.norm -> cupy.linalg.norm
            namespace = getattr(namespace, part, None)
        fake = getattr(namespace, func.__name__, None)
        if fake is None:
            raise TypeError(f"fake CuPy: no implementation of numpy.{func.__name__}")
        return fake(*args, **kwargs)


def _binary(name: str, reflected: bool = False, inplace: bool = False):
    op = getattr(operator, name)

    def method(self, other):
        if isinstance(other, np.ndarray):  # CuPy: "Unsupported type <class 'numpy.ndarray'>"
            raise TypeError(f"Unsupported type {type(other)} (a host array in a device op)")
        if not isinstance(other, ndarray | np.generic | int | float | complex):
            return NotImplemented  # CuPy too: then Python asks ``other`` (pytest.approx, ...)
        _kernel(name.rstrip("_"))
        if inplace:
            op(self._a, _unwrap(other))
            return self
        a, b = (other, self) if reflected else (self, other)
        a, b = _unwrap(a), _unwrap(b)
        if name == "matmul":
            _refuse_batched_bfloat16(a, b)
            return _wrap(_product_dtype(op(a, b), a, b))
        return _wrap(op(a, b))

    return method


for _name in "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift".split():
    _dunder = _name if _name not in ("and", "or") else _name + "_"
    setattr(ndarray, f"__{_name}__", _binary(_dunder))
    setattr(ndarray, f"__r{_name}__", _binary(_dunder, reflected=True))
    setattr(ndarray, f"__i{_name}__", _binary("i" + _dunder.rstrip("_"), inplace=True))
for _name in "lt le eq ne gt ge".split():
    setattr(ndarray, f"__{_name}__", _binary(_name))


def _unary(name: str):
    op = getattr(operator, name)

    def method(self):
        _kernel(name)
        return _wrap(op(self._a))

    return method


for _name in "neg pos abs invert".split():
    setattr(ndarray, f"__{_name}__", _unary(_name))


_WRAPPERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id(array) -> wrapper


def _refuse_batched_bfloat16(a, b):
    """CuPy 14.2's matmul of bfloat16 arrays with more than two axes takes its integer path (a
    hand-written kernel that sums the products in bfloat16, cupy/_core/_routines_linalg.pyx:
    only 'efdFD' reach cuBLAS there; cupy/cupy#10317 is the fix, not released): the library
    must not call it. Two-axis products go to cuBLAS (gemmEx, float32 sums) and are fine."""
    a, b = (x._a if isinstance(x, ndarray) else np.asarray(x) for x in (a, b))
    if max(a.ndim, b.ndim) > 2 and str(np.result_type(a.dtype, b.dtype)) == "bfloat16":
        raise TypeError(
            f"CuPy's matmul of bfloat16 arrays with more than two axes ({a.shape} @ {b.shape}) "
            "sums in bfloat16 (its integer kernel), not with cuBLAS"
        )


def _product_dtype(y, a, b):
    """cuBLAS returns a product of two half-precision arrays in their dtype (NumPy returns
    ml_dtypes' bfloat16 products as float32). A product with one entry (a row times a column,
    two vectors) never reaches cuBLAS: CuPy 14.2 sums it with a reduction kernel in the half
    dtype (``tensordot_core``, m == n == 1; seen on a GPU: 5000 products of 0.1 × 0.1 in
    float16 gave 50.06, not 49.97), emulated by a running sum in that dtype."""
    same = getattr(a, "dtype", None) == getattr(b, "dtype", None)
    if not (same and a.dtype.itemsize == 2):
        return y
    k = a.shape[-1]
    if a.size == k and b.size == k and max(a.ndim, b.ndim) <= 2 and k:
        products = a.reshape(-1).astype(a.dtype) * b.reshape(-1).astype(a.dtype)
        return np.cumsum(products, dtype=a.dtype)[-1].reshape(y.shape)
    return y.astype(a.dtype) if y.dtype != a.dtype else y


def _wrap(x):
    """NumPy's results as CuPy returns them: arrays and scalars as device arrays. A NumPy array
    that already has a device array around it gets the same one back (``base`` identity)."""
    if isinstance(x, np.ndarray):
        known = _WRAPPERS.get(id(x))
        if known is not None and known._a is x:
            return known
        _WRAPPERS[id(x)] = wrapper = ndarray(x)
        return wrapper
    if isinstance(x, np.generic):  # CuPy's reductions and indexing return 0-d arrays
        return ndarray(np.asarray(x))
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    return x


def _unwrap(x, host_ok: bool = False):
    """The NumPy arrays under device arrays; a host array is refused unless ``host_ok``
    (indices and values assigned into a device array: CuPy copies those to the device)."""
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray) and not host_ok:
        raise TypeError(f"Unsupported type {type(x)} (a host array given to a device function)")
    if isinstance(x, tuple | list):
        return type(x)(_unwrap(v, host_ok) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v, host_ok) for k, v in x.items()}
    return x


def _check_arguments(name: str, entry, args, kwargs) -> None:
    """TypeError, as CuPy raises it, for arguments its function ``name`` does not take."""
    if entry is None:
        return
    if len(args) > len(entry["positional"]) and not entry["varargs"]:
        raise TypeError(f"{name}() takes {len(entry['positional'])} positional arguments")
    unknown = set(kwargs) - set(entry["keyword"])
    if unknown and not entry["varkw"]:
        raise TypeError(f"{name}() got an unexpected keyword argument {sorted(unknown)[0]!r}")


class ufunc:  # noqa: N801 - CuPy's name
    """One of CuPy's ufuncs: inputs by position, only out/dtype/casting by name."""

    def __init__(self, name: str):
        self.__name__, self._np = name, getattr(np, name)  # (a few are functions in NumPy)
        self.nin, self.nout = getattr(self._np, "nin", 1), getattr(self._np, "nout", 1)

    def __call__(self, *args, **kwargs):
        bad = set(kwargs) - set(TABLE["ufunc_keywords"])
        if bad:
            raise TypeError(f"Wrong arguments {dict((k, kwargs[k]) for k in sorted(bad))}")
        _kernel(self.__name__)
        out = kwargs.get("out")
        if isinstance(out, tuple):
            out = out[0] if len(out) == 1 else out
            kwargs["out"] = out
        if out is not None and not isinstance(out, ndarray):
            raise TypeError(f"{self.__name__}: out must be a cupy.ndarray, got {type(out)}")
        result = self._np(*_unwrap(args), **_unwrap(kwargs))
        return out if out is not None else _wrap(result)

    def _method(self, name, *args, **kwargs):
        _kernel(f"{self.__name__}.{name}")
        _check_arguments(f"{self.__name__}.{name}", TABLE["ufunc_methods"][name], args, kwargs)
        return _wrap(getattr(self._np, name)(*_unwrap(args), **_unwrap(kwargs)))

    def at(self, *args, **kwargs):
        # (the indices may be a host array: CuPy's scatter copies them over like __setitem__)
        a, indices, *rest = args
        if str(a.dtype) == "bfloat16":
            raise TypeError(f"cupy.{self.__name__}.at has no bfloat16 (CuPy 14.2)")
        _kernel(f"{self.__name__}.at")
        _check_arguments(f"{self.__name__}.at", TABLE["ufunc_methods"]["at"], args, kwargs)
        self._np.at(_unwrap(a), _unwrap(indices, host_ok=True), *_unwrap(rest), **kwargs)

    reduce = functools.partialmethod(_method, "reduce")
    reduceat = functools.partialmethod(_method, "reduceat")
    accumulate = functools.partialmethod(_method, "accumulate")
    outer = functools.partialmethod(_method, "outer")


def _function(name: str, table: dict, numpy_namespace=np):
    entry, fn = table[name], getattr(numpy_namespace, name, None)
    if isinstance(fn, type):  # dtypes (float32, ...) and classes are NumPy's own
        return fn

    def call(*args, **kwargs):
        if fn is None:
            raise NotImplementedError(f"fake CuPy: {name} is not emulated")
        _check_arguments(name, entry, args, kwargs)
        if name not in _VIEWS:
            _kernel(name)
        host_ok = name in _TRANSFERS
        result = fn(*_unwrap(args, host_ok), **_unwrap(kwargs, host_ok))
        if host_ok and not isinstance(result, np.ndarray):
            result = np.asarray(result)
        if (
            host_ok
            and args
            and isinstance(args[0], np.ndarray)
            and np.shares_memory(result, args[0])
        ):
            result = result.copy()  # a transfer copies: the device never shares host memory
        return _wrap(result)

    call.__name__ = name
    return call


# ---------------------------------------------------------------- random numbers
class XORWOW:
    """CuPy's bit generator's layout: the state is a device array, ``state()`` a method."""

    def __init__(self, seed=None):
        seq = np.random.SeedSequence(seed)
        self._state = _wrap(seq.generate_state(16, np.uint32).view(np.int8).copy())

    def state(self):
        return id(self._state)


class Generator:
    """CuPy's Generator: every draw reads the device state and moves it on."""

    def __init__(self, bit_generator):
        self.bit_generator = bit_generator

    def _draw(self, name, *args, **kwargs):
        _check_arguments(f"Generator.{name}", TABLE["generator_methods"][name], args, kwargs)
        state = self.bit_generator._state._a
        numpy_gen = np.random.default_rng(state.view(np.uint32).copy())
        if name == "integers":
            kwargs.setdefault("dtype", np.int64)
        out = getattr(numpy_gen, name)(*args, **kwargs)
        state[...] = numpy_gen.integers(0, 2**32, state.size // 4, dtype=np.uint32).view(np.int8)
        return _wrap(np.asarray(out))

    random = functools.partialmethod(_draw, "random")
    standard_normal = functools.partialmethod(_draw, "standard_normal")
    integers = functools.partialmethod(_draw, "integers")
    uniform = functools.partialmethod(_draw, "uniform")


def default_rng(seed=None):
    return Generator(XORWOW(seed))


# ---------------------------------------------------------------- the module
module = types.ModuleType("cupy", "CuPy emulated on the CPU (tests/fake_cupy.py)")
module.__version__ = "fake-" + TABLE["cupy_version"]
_UFUNCS = {name: ufunc(name) for name in TABLE["ufuncs"] if hasattr(np, name)}
for _name, _entry in TABLE["functions"].items():
    setattr(module, _name, _function(_name, TABLE["functions"]))
module.ndarray = ndarray
module.ufunc = ufunc
_matmul = module.matmul


def _module_matmul(a, b, **kw):
    _refuse_batched_bfloat16(a, b)
    return _wrap(_product_dtype(_unwrap(_matmul(a, b, **kw)), a, b))


module.matmul = _module_matmul


def _float32_for_bfloat16(name):
    """CuPy 14.2's ``where``, ``tril`` and ``triu`` return float32 for bfloat16 arrays."""
    numpy_fn = getattr(module, name)

    def call(*args, **kwargs):
        out = numpy_fn(*args, **kwargs)
        return out.astype(np.float32) if str(out.dtype) == "bfloat16" else out

    return call


def _no_bfloat16(name):
    """CuPy 14.2 sorts no bfloat16: "Unsupported dtype (bfloat16)"."""
    numpy_fn = getattr(module, name)

    def call(a, *args, **kwargs):
        if str(a.dtype) == "bfloat16":
            raise ValueError("Unsupported dtype (bfloat16)")
        return numpy_fn(a, *args, **kwargs)

    return call


for _name in ("where", "tril", "triu"):
    setattr(module, _name, _float32_for_bfloat16(_name))
for _name in ("sort", "argsort"):
    setattr(module, _name, _no_bfloat16(_name))
for _name, _u in _UFUNCS.items():
    setattr(module, _name, _u)
for _name in ("newaxis", "inf", "nan", "pi", "e", "dtype", "iinfo", "finfo"):
    setattr(module, _name, getattr(np, _name))


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    if isinstance(a, ndarray):
        _sync("asnumpy")
        return a._a.copy()
    return np.asarray(a)


module.asnumpy = asnumpy
module.get_array_module = lambda *args: module if any(isinstance(a, ndarray) for a in args) else np


def fuse(*args, kernel_name=None):
    """CuPy compiles the function into one kernel; here it runs as written, counted as one."""

    def decorate(f):
        def kernel(*a):
            _kernel(f"fused {kernel_name or getattr(f, '__name__', 'kernel')}")
            _FUSING[0] += 1
            try:
                return f(*a)
            finally:
                _FUSING[0] -= 1

        return kernel

    return decorate(args[0]) if args else decorate


module.fuse = fuse
module.random = types.SimpleNamespace(default_rng=default_rng, Generator=Generator)
module.linalg = types.SimpleNamespace(
    **{n: _function(n, TABLE["modules"]["linalg"], np.linalg) for n in TABLE["modules"]["linalg"]}
)


def _each_kernel(math, dtypes, scalar_types, total):
    """A ``.each`` kernel (tensorlab/fused.py: ``_each_kernel``), which CuPy would compile from
    the traced function: here each block reads its row of the table as the CUDA code does (its
    tensor, its first element, the tensor's size and addresses), views those addresses' memory
    as NumPy arrays, and runs the function on its elements; with ``total`` (``.each_sum``) it
    writes the float64 sum of the function's values into its entry of ``partial``. Counted as
    one launch."""
    from tensorlab.fused import CHUNK, NUMPY

    arrays = len(dtypes)
    method = f"{math.__name__}.each_sum" if total else f"{math.__name__}.each"

    def launch(table, tensors, blocks, scalars, partial=None):
        if blocks < 1:  # CUDA: cudaErrorInvalidConfiguration
            raise RuntimeError(f"fused each {math.__name__}: a launch of {blocks} thread blocks")
        if total != (partial is not None):
            raise TypeError(f"{method}: partial sums given to the wrong kernel")
        _kernel(f"fused each{'_sum' if total else ''} {math.__name__}")
        t = table._a
        size = t[tensors * arrays :]  # then each block's tensor, then each block's first element
        for b in range(blocks):
            k, start = size[tensors + b], size[tensors + blocks + b]
            end = min(start + CHUNK, size[k])
            views = [
                _at_address(t[k * arrays + j], size[k], dtype)[start:end]
                for j, dtype in enumerate(dtypes)
            ]
            _FUSING[0] += 1
            try:
                value = math(NUMPY, *views, *scalars)
            finally:
                _FUSING[0] -= 1
            if not total and value is not None:
                raise TypeError(f"{method} needs a kernel that returns nothing")
            if total and not hasattr(value, "dtype"):
                raise TypeError(f"{method} needs a kernel that returns one array")
            if total:
                partial._a[b] = value.sum(dtype=np.float64)

    return launch


def _half_kernel(math, name, kinds, half, keep, rounds):
    """A kernel's half runner (tensorlab/fused.py: ``_half_kernel``), which CuPy would compile
    from the function traced on float32: here the function runs on the arguments' values,
    each half array widened to float32 (as the CUDA code converts each element it reads), and
    its outputs are rounded to the dtypes the library chose (``fused.half_dtypes``). The
    runner's promise, contiguous arrays of the launch's shape, is checked. Counted as one
    launch."""
    from tensorlab.fused import HALF, NUMPY, half_dtypes

    def launch(args, shape):
        _kernel(f"fused half {name}")
        values = []
        for a, kind in zip(args, kinds):
            if isinstance(kind, np.dtype):
                if not isinstance(a, ndarray) or a.shape != shape or not a.flags.c_contiguous:
                    raise ValueError(f"fused half {name}: an argument not of {shape}")
                values.append(a._a.astype(np.float32) if kind in HALF else a._a)
            else:
                values.append(a)
        _FUSING[0] += 1
        try:
            out = math(NUMPY, *values)
        finally:
            _FUSING[0] -= 1
        outs = out if isinstance(out, tuple) else (out,)
        dtypes = half_dtypes([np.asarray(o).dtype for o in outs], half, keep, rounds)
        results = [
            _wrap(np.ascontiguousarray(np.broadcast_to(o, shape)).astype(d))
            for o, d in zip(outs, dtypes)
        ]
        return tuple(results) if len(results) > 1 else results[0]

    return launch


def _at_address(address, n, dtype) -> np.ndarray:
    """The n elements of ``dtype`` at ``address`` as a NumPy array (writable, no copy)."""
    dtype = np.dtype(dtype)
    memory = (ctypes.c_char * (int(n) * dtype.itemsize)).from_address(int(address))
    return np.frombuffer(memory, dtype=dtype)


# A row kernel's threads per block (tensorlab/cuda_rows.py: THREADS, 128 on a GPU): the emulation
# runs every thread as a fiber, so it takes fewer (any power of two gives the same numbers up to
# the order of a row's sums).
ROW_THREADS = 8

# Every launch of a RawModule's kernels runs each block's threads in reverse order when True
# (tests/cuda_emulator.py): a kernel without races gives the same numbers both ways.
REVERSE_THREADS = [False]


class RawModule:
    """``cupy.RawModule(code=..., options=...)``: CUDA C++ compiled by NVRTC on a GPU; here by
    g++ and run on the CPU, every thread of a block a fiber that yields at ``__syncthreads``
    (tests/cuda_emulator.py). ``get_function(name)(grid, block, args)`` launches as CuPy's
    kernel does: a device array is passed as the address of its first element, a NumPy scalar
    by value. Counted as one launch."""

    def __init__(self, code: str = None, options: tuple = (), **kwargs):
        from tests import cuda_emulator

        why = cuda_emulator.unavailable()
        if why is not None:  # (a newcomer's machine may have no g++): the test skips
            import pytest

            pytest.skip(f"a CUDA kernel on the emulated GPU: {why}")
        self._module = cuda_emulator.Module(code, tuple(options))

    def get_function(self, name: str):
        emulated = self._module.get_function(name)

        def launch(grid, block, args, shared_mem=0):
            _kernel(name)
            host = tuple(a._a if isinstance(a, ndarray) else a for a in args)
            emulated(grid, block, host, shared_mem, reverse=REVERSE_THREADS[0])

        return launch


module.RawModule = RawModule


class _Device:
    def __init__(self, device_id=0):
        self.id = device_id

    def synchronize(self):
        pass


# cuBLAS's names for dtypes (cudaDataType), its compute type and operations (cublas_api.h)
_CUDA_DTYPES = {0: np.dtype(np.float32), 2: np.dtype(np.float16)}
if BFLOAT16 is not None:
    _CUDA_DTYPES[14] = BFLOAT16
_OP_N, _OP_T, _COMPUTE_32F = 0, 1, 68


def _gemm_strided_batched_ex(
    handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
    beta, C, Ctype, ldc, strideC, batch, compute, algo,
):  # fmt: skip
    """cublasGemmStridedBatchedEx as its manual defines it, on memory given by address:
    C_i = α op(A_i) op(B_i) + β C_i for i < batch, where op(A_i) is m × k, op(B_i) k × n and
    C_i m × n, every matrix stored by columns (entry (r, c) at r + c·ld, ld at least its
    stored rows), matrix i of A starting strideA elements after matrix i - 1 (0: the same
    one for all). Products summed in float32 (only CUBLAS_COMPUTE_32F is emulated), α and β
    float32 numbers on the host, the result rounded once into Ctype."""
    if compute != _COMPUTE_32F:
        raise ValueError(f"fake cuBLAS: only CUBLAS_COMPUTE_32F is emulated, not {compute}")
    _kernel("cublas.gemmStridedBatchedEx")
    alpha, beta = (float(_at_address(p, 1, np.float32)[0]) for p in (alpha, beta))

    def matrix(address, kind, rows, cols, ld, op=_OP_N):  # op(X) as a (rows, cols) view
        dtype = _CUDA_DTYPES[kind]
        stored = (rows, cols) if op == _OP_N else (cols, rows)
        if ld < max(1, stored[0]):
            raise ValueError(f"fake cuBLAS: leading dimension {ld} < {stored[0]} rows")
        flat = _at_address(address, ld * (stored[1] - 1) + stored[0], dtype)
        size = dtype.itemsize
        x = np.lib.stride_tricks.as_strided(flat, stored, (size, ld * size))
        return x if op == _OP_N else x.T

    sizes = [_CUDA_DTYPES[t].itemsize for t in (Atype, Btype, Ctype)]
    for i in range(batch):
        a = matrix(A + i * strideA * sizes[0], Atype, m, k, lda, transa).astype(np.float32)
        b = matrix(B + i * strideB * sizes[1], Btype, k, n, ldb, transb).astype(np.float32)
        c = matrix(C + i * strideC * sizes[2], Ctype, m, n, ldc)
        value = np.float32(alpha) * (a @ b)
        if beta:
            value += np.float32(beta) * c.astype(np.float32)
        c[...] = value.astype(c.dtype)


module.cuda = types.SimpleNamespace(
    Device=_Device,
    get_device_id=lambda: 0,
    get_cublas_handle=lambda: 1,
    runtime=types.SimpleNamespace(
        getDeviceCount=lambda: 1, CUDA_R_32F=0, CUDA_R_16F=2, CUDA_R_16BF=14
    ),
    cublas=types.SimpleNamespace(
        CUBLAS_OP_N=_OP_N,
        CUBLAS_OP_T=_OP_T,
        CUBLAS_COMPUTE_32F=_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT=-1,
        gemmStridedBatchedEx=_gemm_strided_batched_ex,
    ),
)


def _erf(x):
    from tensorlab.backend import erf_exact

    a = _unwrap(x)
    return _wrap(np.asarray(erf_exact(a), dtype=np.result_type(a, np.float32)))


def install(monkeypatch=None) -> None:
    """Make ``import cupy`` (and ``cupyx.scipy.special``) this module, and tensorlab's CuPy;
    for one test only when given pytest's ``monkeypatch`` (which undoes it afterwards). A test
    that asks for it while a real GPU is the test device is skipped: the kernels compiled for
    the real CuPy would meet emulated arrays, and the tests beside it run the real thing."""
    if monkeypatch is not None and os.environ.get("TENSORLAB_TEST_DEVICE") == "cuda":
        import pytest

        pytest.skip("emulates CuPy on the CPU; with a real GPU the other tests run on it")
    special = types.ModuleType("cupyx.scipy.special")
    special.erf = _erf
    scipy = types.ModuleType("cupyx.scipy")
    scipy.special = special
    cupyx = types.ModuleType("cupyx")
    cupyx.scipy = scipy
    modules = {"cupy": module, "cupyx": cupyx, "cupyx.scipy": scipy, "cupyx.scipy.special": special}
    from tensorlab import backend, cuda_rows, fused

    if monkeypatch is None:
        sys.modules.update(modules)
        backend.cupy = module
        fused._each_kernel = _each_kernel
        fused._half_kernel = _half_kernel
        cuda_rows.THREADS = ROW_THREADS
        return
    for name, value in modules.items():
        monkeypatch.setitem(sys.modules, name, value)
    monkeypatch.setattr(backend, "cupy", module)
    monkeypatch.setattr(fused, "_each_kernel", _each_kernel)
    monkeypatch.setattr(fused, "_half_kernel", _half_kernel)
    monkeypatch.setattr(cuda_rows, "THREADS", ROW_THREADS)
    monkeypatch.setattr(backend, "_generators", dict(backend._generators))
