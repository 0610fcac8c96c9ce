"""Backends: which array module (NumPy or CuPy) holds a tensor's data.

A tensor's device is a property of its array: a ``numpy.ndarray`` lives on ``"cpu"``, a
``cupy.ndarray`` on ``"cuda"``. Ops never import numpy or cupy for math; they ask
:func:`xp_of` for the module that owns their input arrays, so one op definition serves both.

This module also owns the random number generators (one per device), so that
:func:`manual_seed` makes every random draw reproducible.
"""

from __future__ import annotations

import math

import numpy as np

try:  # CuPy is optional: installed with the ``cuda`` extra, usable only with a GPU.
    import cupy as _cupy

    try:
        _cupy.cuda.runtime.getDeviceCount()
        cupy = _cupy
    except Exception:  # installed, but no GPU or no driver
        cupy = None
except ImportError:
    cupy = None

DEFAULT_DTYPE = np.float32
DEVICES = ("cpu", "cuda")

# type(array) -> array module. Filled lazily so that NumPy scalar types
# (np.float32(1.0) and friends, which reductions may return) also map to numpy.
_XP: dict[type, object] = {np.ndarray: np}


try:  # bfloat16 on the CPU: NumPy knows it once ml_dtypes has registered it (the dev extra)
    import ml_dtypes

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BFLOAT16 = None

_HALF = np.dtype(np.float16)
_BF16 = BFLOAT16 if BFLOAT16 is not None else _HALF  # (an alias keeps acc_dtype's test short)
LOW_PRECISION = ("float16", "bfloat16")  # the compute dtypes of mixed precision (tl.autocast)


def acc_dtype(array):
    """The dtype to accumulate sums and products of ``array`` in: float32 for float16 and
    bfloat16, whose 11- and 8-bit significands drop small addends once a partial sum has grown
    (a float16 running sum of 5000 × 0.1 stops at 256), else None (the array's own). Results
    are cast back."""
    dt = array.dtype
    return np.float32 if (dt is _HALF or dt is _BF16) else None


def in_float32(x):
    """``(x, None)``, or for a float16/bfloat16 array ``(x in float32, its dtype)``: the ops
    that normalize or exponentiate (norms, softmax, activations, attention) compute half inputs
    in float32 and round the result back once with :func:`rounded`."""
    acc = acc_dtype(x)
    return (x, None) if acc is None else (x.astype(acc), x.dtype)


def rounded(y, half):
    """``y`` back in the half dtype :func:`in_float32` returned (unchanged for None)."""
    return y if half is None else y.astype(half)


def is_float(dtype) -> bool:
    """True for floating-point dtypes, bfloat16 included (NumPy files ml_dtypes' bfloat16 under
    kind 'V', not 'f')."""
    return dtype.kind == "f" or (BFLOAT16 is not None and dtype == BFLOAT16)


def as_dtype(dtype) -> np.dtype:
    """``np.dtype(dtype)``, where "bfloat16" needs ml_dtypes (a one-line error without it)."""
    if BFLOAT16 is None and str(dtype) == "bfloat16":
        raise TypeError("bfloat16 on the CPU needs ml_dtypes: pip install ml_dtypes")
    return np.dtype(dtype)


def matmul(a, b, out=None, dtype=None):
    """a @ b (written into ``out`` when given); two float16 (or two bfloat16) arrays give a
    result whose products are summed in float32 and rounded once into ``dtype`` (default:
    ``out``'s, else the operands'): float32 keeps the sums unrounded (the gradients that
    autocast sends to float32 parameters, nn/linear.py). NumPy is asked for a float32 product
    (its own float16 matmul has no BLAS; its bfloat16 one returns float32). cuBLAS sums CuPy's half
    matrices of two axes in float32 by itself, on the tensor cores, so those are taken as they
    are when the result is in their dtype; a product of one entry (which CuPy sums in the half
    dtype) is widened, and the other products go to cuBLAS in one call (:func:`_half_cublas`:
    CuPy 14.2's own batched bfloat16 product sums in bfloat16, cupy/cupy#10317; docs/gpu.md)."""
    xp = xp_of(a)
    acc = acc_dtype(a) if a.dtype == b.dtype else None  # half @ float32 is a float32 product
    if acc is None:
        return xp.matmul(a, b, out=out)
    dtype = np.dtype(dtype or (a.dtype if out is None else out.dtype))
    k = a.shape[-1]
    if xp is np or (a.size == k and b.size == k):  # (one entry: CuPy's half reduction, widened)
        if xp is np:
            product = xp.matmul(a, b, dtype=acc)
        else:
            product = xp.matmul(a.astype(acc), b.astype(acc))
        if out is None:
            return product.astype(dtype, copy=False)
        out[...] = product
        return out
    if a.ndim <= 2 and b.ndim <= 2 and dtype == a.dtype:
        return xp.matmul(a, b, out=out)
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous:  # (..., n, k) @ (k, m): one GEMM
        rows = None if out is None else out.reshape(-1, b.shape[-1])
        product = matmul(a.reshape(-1, k), b, out=rows, dtype=dtype)
        return product.reshape(a.shape[:-1] + b.shape[-1:]) if out is None else out
    return _half_cublas(a, b, dtype, out)


def _half_cublas(a, b, dtype, out=None):
    """a @ b for CuPy float16 or bfloat16 (stacks of) matrices (..., n, k) @ (..., k, m), as
    one cuBLAS call (``cublasGemmStridedBatchedEx``): every matrix's products summed in float32
    on the tensor cores, rounded once into ``dtype`` (the half dtype or float32), written into
    ``out`` (contiguous) when given. A vector a is a matrix of one row, a vector b one of one
    column (as in NumPy, that axis is not in the result). cuBLAS reads matrices by columns: a
    row-major (n, m) result is, read by columns, its transpose, and Cᵀ = Bᵀ Aᵀ, so b goes first
    (m × k), then a (k × n). A matrix stored by columns (the ``.mT`` of a row-major one, as a
    backward's ``g Wᵀ`` reads W) is taken as it is, with cuBLAS's transpose flag. A stack that
    the other broadcasts against (a single matrix, batch axes of 1) is read with stride 0;
    other broadcast batch axes are copied out first."""
    cublas, runtime = cupy.cuda.cublas, cupy.cuda.runtime  # (cublas: loaded on first use)
    rows, cols = a.shape[-2:-1], b.shape[-1:] if b.ndim > 1 else ()  # (a vector has none)
    a, b = (a.reshape(1, -1) if a.ndim == 1 else a), (b.reshape(-1, 1) if b.ndim == 1 else b)
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    shape = (*batch, *rows, *cols)
    out = cupy.empty(shape, dtype) if out is None else out
    if out.size == 0 or k == 0:  # (cuBLAS wants leading dimensions of at least 1)
        out[...] = 0
        return out

    def operand(x):
        """(x's memory, cuBLAS's op for it, its leading dimension, the elements from one
        matrix to the next): x read by columns is xᵀ (op N) or, stored by columns, x (op T)."""
        rows, cols = x.shape[-2:]
        if math.prod(x.shape[:-2]) == 1:
            x, stride = x.reshape(rows, cols), 0
            if x.flags.f_contiguous and not x.flags.c_contiguous:
                return x, cublas.CUBLAS_OP_T, max(rows, 1), stride
        else:
            x = cupy.broadcast_to(x, (*batch, rows, cols))
            stride = rows * cols
        x = x if x.flags.c_contiguous else cupy.ascontiguousarray(x)
        return x, cublas.CUBLAS_OP_N, max(cols, 1), stride

    (b, op_b, ld_b, stride_b), (a, op_a, ld_a, stride_a) = operand(b), operand(a)
    kinds = {np.float32: runtime.CUDA_R_32F, np.float16: runtime.CUDA_R_16F}  # else bfloat16
    kind, out_kind = (kinds.get(x.dtype.type, runtime.CUDA_R_16BF) for x in (a, out))
    one, zero = np.ones((), np.float32), np.zeros((), np.float32)  # host: cuBLAS's α, β
    cublas.gemmStridedBatchedEx(
        cupy.cuda.get_cublas_handle(), op_b, op_a, m, n, k,
        one.ctypes.data, b.data.ptr, kind, ld_b, stride_b, a.data.ptr, kind, ld_a, stride_a,
        zero.ctypes.data, out.data.ptr, out_kind, m, n * m,
        math.prod(batch), cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT,
    )  # fmt: skip
    return out


def cuda_available() -> bool:
    """True when CuPy is installed and a CUDA device answers."""
    return cupy is not None


def xp_of(array) -> object:
    """The array module (``numpy`` or ``cupy``) that owns ``array``."""
    try:
        return _XP[type(array)]
    except KeyError:
        pass
    if isinstance(array, np.generic | np.ndarray):
        xp = np
    elif cupy is not None and isinstance(array, cupy.ndarray):
        xp = cupy
    else:
        raise TypeError(f"expected a numpy or cupy array, got {type(array).__name__}")
    _XP[type(array)] = xp
    return xp


def erf_exact(z):
    """erf of a raw float array, exact to an ulp or two, in z's dtype: Python's ``math.erf``
    entry by entry on NumPy (which has no erf; one Python call per entry, so slow), and
    ``cupyx.scipy.special.erf`` (CUDA's ``erf``) on CuPy."""
    if xp_of(z) is np:
        flat = np.fromiter(map(math.erf, z.ravel().tolist()), np.float64, z.size)  # host: NumPy
        return flat.reshape(z.shape).astype(z.dtype, copy=False)
    from cupyx.scipy.special import erf  # pragma: no cover - needs a GPU

    return erf(z)  # pragma: no cover


def host_ints(*values) -> list[int]:
    """0-d integer arrays (on one device) as Python ints, read in one transfer: one wait for a
    GPU, where every read stops the host until the queued work is done. (NumPy's reductions
    return host scalars or ints already: nothing to stack.)"""
    if all(isinstance(v, np.generic | int) for v in values):
        return [int(v) for v in values]
    return xp_of(values[0]).stack(values).tolist()


def min_max(ints) -> tuple[int, int]:
    """The least and greatest entry of an integer array as Python ints, read in one transfer;
    (0, 0) for an empty array. The range checks of indices use it."""
    if not ints.size:
        return 0, 0
    lo, hi = host_ints(ints.min(), ints.max())
    return lo, hi


def device_of(array) -> str:
    """``"cpu"`` for NumPy arrays, ``"cuda"`` for CuPy arrays."""
    return "cpu" if xp_of(array) is np else "cuda"


def xp_for(device: str | None) -> object:
    """The array module for a device name (None: the default device), with a clear error if it
    is unavailable."""
    device = device or default_device()
    if device == "cpu":
        return np
    if device == "cuda" or device.startswith("cuda:"):
        if cupy is None:
            raise RuntimeError(
                "device 'cuda' needs CuPy and a CUDA GPU; install the extra with "
                "pip install -e '.[cuda]' on a machine with an NVIDIA GPU"
            )
        return cupy
    raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")


_default_device = ["cpu"]


def default_device() -> str:
    """The device new tensors and parameters go to when none is named ("cpu" unless
    :func:`set_default_device` says otherwise)."""
    return _default_device[0]


def set_default_device(device: str) -> None:
    """Make ``device`` ("cpu" or "cuda") the default of every function that creates a tensor
    or a parameter without being told a device (as ``torch.set_default_device``). The test
    suite runs on a GPU this way: ``TENSORLAB_TEST_DEVICE=cuda pytest``."""
    xp_for(device)  # an unknown or unavailable device is refused here, by name
    _default_device[0] = device


def to_device(array, device: str):
    """Copy ``array`` to ``device`` (no copy if it is already there)."""
    xp = xp_for(device)
    if xp_of(array) is xp:
        return array
    if xp is np:
        return cupy.asnumpy(array)
    return cupy.asarray(array)


# ---------------------------------------------------------------- random numbers
_generators: dict[str, object] = {}


def manual_seed(seed: int) -> None:
    """Seed the random generators of every device, for reproducible runs."""
    _generators["cpu"] = np.random.default_rng(seed)
    if cupy is not None:
        _generators["cuda"] = cupy.random.default_rng(seed)


def generator(device: str | None = None):
    """The random generator of ``device`` (the default device when None; seeded from
    entropy until :func:`manual_seed`)."""
    device = device or default_device()
    gen = _generators.get(device)
    if gen is None:
        gen = _generators[device] = xp_for(device).random.default_rng()
    return gen


def generator_state(device: str | None = None):
    """A copy of the state of ``device``'s random generator, for :func:`set_generator_state`
    (dropout masks drawn again in a recomputation, a resumed training run).

    On the CPU it is NumPy's ``bit_generator.state``, a dict of ints. CuPy's generator has no
    such attribute (its ``bit_generator.state`` is a method that returns a device pointer):
    its state is the array of cuRAND states, one per GPU thread, that every draw reads and
    advances. The copy is a device array of those bytes (a few MB), kept on the GPU so that
    saving and restoring it costs no transfer; checkpoint files store it like any array."""
    gen = generator(device)
    if xp_for(device) is np:
        return gen.bit_generator.state
    return _curand_states(gen).copy()


def set_generator_state(state, device: str | None = None) -> None:
    """Put ``device``'s random generator back in ``state`` (from :func:`generator_state`,
    possibly read back from a file: a CuPy state may be a host array)."""
    gen = generator(device)
    if xp_for(device) is np:
        gen.bit_generator.state = state
        return
    states = _curand_states(gen)
    if getattr(state, "shape", None) != states.shape or state.dtype != states.dtype:
        raise ValueError(
            f"set_generator_state: a CuPy generator state is {states.dtype} of shape "
            f"{states.shape}, got {type(state).__name__} {getattr(state, 'shape', '')} (saved "
            "on another GPU model or CuPy version?)"
        )
    states[...] = cupy.asarray(state)


def _curand_states(gen):
    """The device array of cuRAND states behind CuPy's ``Generator`` (``bit_generator._state``,
    CuPy's own attribute: it offers no public way to read or set a generator's state). Refused
    by name, rather than guessed, if a CuPy version keeps it elsewhere."""
    states = getattr(getattr(gen, "bit_generator", None), "_state", None)
    if cupy is None or not isinstance(states, cupy.ndarray):
        version = getattr(cupy, "__version__", "?")
        raise RuntimeError(
            f"CuPy {version}: cannot read the random generator's state "
            "(Generator.bit_generator._state is not a device array in this version)"
        )
    return states
